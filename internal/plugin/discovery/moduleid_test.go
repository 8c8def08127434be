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

// TestDiscoverModuleID: NVML's module ID becomes the GPU's; a GPU without
// one, a driver without the call (never called: the symbol is looked up
// first), 0, a negative value and an unexpected error leave the GPU without
// one but discovered; a lost GPU is unavailable.
func TestDiscoverModuleID(t *testing.T) {
	tests := []struct {
		name      string
		value     int
		ret       nvml.Return
		noSymbol  bool
		want      int
		available bool
	}{
		{name: "module 5", value: 5, want: 5, available: true},
		{name: "not on a baseboard (0)", value: 0, available: true},
		{name: "not supported", ret: nvml.ERROR_NOT_SUPPORTED, available: true},
		{name: "driver without the call", noSymbol: true, available: true},
		{name: "negative value", value: -1, available: true},
		{name: "unexpected error", value: 5, ret: nvml.ERROR_UNKNOWN, available: true},
		{name: "lost GPU", ret: nvml.ERROR_GPU_IS_LOST},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib := fakeLib("", nvml.ERROR_NOT_SUPPORTED)
			lib.ExtensionsFunc = func() nvml.ExtendedInterface {
				return &mock.ExtendedInterface{LookupSymbolFunc: func(sym string) error {
					if sym == fabricInfoVSymbol || tc.noSymbol && sym == moduleIDSymbol {
						return fmt.Errorf("undefined symbol: %s", sym)
					}
					return nil
				}}
			}
			dev, _ := lib.DeviceGetHandleByIndex(0)
			dev.(*mock.Device).GetModuleIdFunc = func() (int, nvml.Return) {
				if tc.noSymbol {
					t.Error("nvmlDeviceGetModuleId called on a library without it")
				}
				return tc.value, tc.ret
			}
			node, err := Discover(context.Background(), noRoot{lib}, Options{})
			require.NoError(t, err)
			if !tc.available {
				require.Empty(t, node.GPUs)
				require.Len(t, node.Unavailable, 1)
				return
			}
			require.Len(t, node.GPUs, 1)
			assert.Equal(t, tc.want, node.GPUs[0].ModuleID)
		})
	}
}

// TestDiscoverModuleIDFromSimulatedProfiles: through the simulator, the
// GPUs of 8-GPU baseboards report modules 1..8; other GPUs report none.
func TestDiscoverModuleIDFromSimulatedProfiles(t *testing.T) {
	for profile, want := range map[string][]int{
		"dgx-h100": {1, 2, 3, 4, 5, 6, 7, 8}, "hgx-b200": {1, 2, 3, 4, 5, 6, 7, 8},
		"l4": {0, 0}, "gb200-nvl72-tray": {0, 0, 0, 0},
	} {
		t.Run(profile, func(t *testing.T) {
			p, err := sim.Load(profile, nil)
			require.NoError(t, err)
			var got []int
			for _, g := range discoverSimulated(t, p).GPUs {
				got = append(got, g.ModuleID)
			}
			assert.Equal(t, want, got)
		})
	}
}
