package sharing

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

func TestComputeModeNeeded(t *testing.T) {
	cfg := func(s v1alpha1.GpuSharingStrategy) *v1alpha1.GpuClaimParameters {
		return &v1alpha1.GpuClaimParameters{Sharing: &v1alpha1.GpuSharing{Strategy: s}}
	}
	for name, tc := range map[string]struct {
		dev    Device
		want   nvml.ComputeMode
		needed bool
	}{
		"MPS on a whole GPU":  {dev: Device{Config: cfg(v1alpha1.MPSStrategy)}, want: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, needed: true},
		"time slicing":        {dev: Device{Config: cfg(v1alpha1.TimeSlicingStrategy)}, want: nvml.COMPUTEMODE_DEFAULT, needed: true},
		"consumable share":    {dev: Device{Share: true}, want: nvml.COMPUTEMODE_DEFAULT, needed: true},
		"MPS share":           {dev: Device{Share: true, Config: cfg(v1alpha1.MPSStrategy)}, want: nvml.COMPUTEMODE_DEFAULT, needed: true},
		"exclusive":           {dev: Device{Config: cfg(v1alpha1.ExclusiveStrategy)}},
		"no config":           {dev: Device{}},
		"MPS on a MIG device": {dev: Device{MIG: true, Config: cfg(v1alpha1.MPSStrategy)}},
		"time-sliced MIG":     {dev: Device{MIG: true, Config: cfg(v1alpha1.TimeSlicingStrategy)}},
	} {
		t.Run(name, func(t *testing.T) {
			got, needed := tc.dev.ComputeModeNeeded()
			require.Equal(t, tc.needed, needed)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestComputeModeNames(t *testing.T) {
	for m := nvml.COMPUTEMODE_DEFAULT; m < nvml.COMPUTEMODE_COUNT; m++ {
		got, err := ParseComputeMode(ComputeModeName(m))
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := ParseComputeMode("compute mode 9")
	require.Error(t, err)
}

func TestNVMLComputeModeErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		ret  nvml.Return
		hint string
	}{
		"no permission": {ret: nvml.ERROR_NO_PERMISSION, hint: "root"},
		"not supported": {ret: nvml.ERROR_NOT_SUPPORTED, hint: "MIG enabled"},
		"lost":          {ret: nvml.ERROR_GPU_IS_LOST, hint: "does not answer"},
		"unknown":       {ret: nvml.ERROR_UNKNOWN, hint: "nvidia-smi"},
	} {
		t.Run(name, func(t *testing.T) {
			dev := &mock.Device{
				SetComputeModeFunc: func(nvml.ComputeMode) nvml.Return { return tc.ret },
				GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) { return 0, tc.ret },
			}
			lib := &mock.Interface{DeviceGetHandleByUUIDFunc: func(string) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS }}
			n := NVMLComputeMode{Lib: lib}
			err := n.SetComputeMode(context.Background(), "GPU-1", nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
			require.ErrorIs(t, err, tc.ret)
			require.ErrorContains(t, err, "EXCLUSIVE_PROCESS")
			require.Contains(t, ComputeModeHint(err), tc.hint)
			_, err = n.ComputeMode(context.Background(), "GPU-1")
			require.ErrorIs(t, err, tc.ret)
		})
	}
}
