package discovery

import (
	"context"
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/sim"
)

// TestDiscoverAddressingMode: NVML's answers become NVIDIA's names; a
// platform without a mode, a driver without the call (never called: the
// symbol is looked up first), an unknown value and an unexpected error
// leave the GPU without a mode but discovered; a lost GPU is unavailable.
func TestDiscoverAddressingMode(t *testing.T) {
	tests := []struct {
		name      string
		value     nvml.DeviceAddressingModeType
		ret       nvml.Return
		noSymbol  bool
		want      string
		available bool
	}{
		{name: "ATS", value: nvml.DEVICE_ADDRESSING_MODE_ATS, want: "ATS", available: true},
		{name: "HMM", value: nvml.DEVICE_ADDRESSING_MODE_HMM, want: "HMM", available: true},
		{name: "None", value: nvml.DEVICE_ADDRESSING_MODE_NONE, want: "None", available: true},
		{name: "not supported", ret: nvml.ERROR_NOT_SUPPORTED, available: true},
		{name: "driver without the call", noSymbol: true, available: true},
		{name: "unknown value", value: 7, available: true},
		{name: "unexpected error", ret: nvml.ERROR_UNKNOWN, available: true},
		{name: "lost GPU", ret: nvml.ERROR_GPU_IS_LOST},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib := fakeLib("", nvml.ERROR_NOT_SUPPORTED)
			lib.ExtensionsFunc = func() nvml.ExtendedInterface {
				return &mock.ExtendedInterface{LookupSymbolFunc: func(sym string) error {
					if sym == fabricInfoVSymbol || tc.noSymbol && sym == addressingModeSymbol {
						return fmt.Errorf("undefined symbol: %s", sym)
					}
					return nil
				}}
			}
			dev, _ := lib.DeviceGetHandleByIndex(0)
			dev.(*mock.Device).GetAddressingModeFunc = func() (nvml.DeviceAddressingMode, nvml.Return) {
				if tc.noSymbol {
					t.Error("nvmlDeviceGetAddressingMode called on a library without it")
				}
				return nvml.DeviceAddressingMode{Value: uint32(tc.value)}, tc.ret
			}
			node, err := Discover(context.Background(), noRoot{lib}, Options{})
			require.NoError(t, err)
			if !tc.available {
				require.Empty(t, node.GPUs)
				require.Len(t, node.Unavailable, 1)
				return
			}
			require.Len(t, node.GPUs, 1)
			assert.Equal(t, tc.want, node.GPUs[0].AddressingMode)
		})
	}
}

// TestDiscoverAddressingModeFromSimulatedProfiles: through the simulator,
// Grace GPUs whose driver has the call report ATS; the GH200 profile's R570
// driver lacks it, and x86 GPUs report none.
func TestDiscoverAddressingModeFromSimulatedProfiles(t *testing.T) {
	for profile, want := range map[string]string{"gb200-nvl72-tray": "ATS", "gh200": "", "dgx-h100": "", "hgx-b200": ""} {
		t.Run(profile, func(t *testing.T) {
			p, err := sim.Load(profile, nil)
			require.NoError(t, err)
			for _, g := range discoverSimulated(t, p).GPUs {
				assert.Equal(t, want, g.AddressingMode, "GPU %d", g.Index)
			}
		})
	}
}
