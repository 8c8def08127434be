package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateSharing(t *testing.T) {
	for _, tc := range []struct {
		value, mig string
		wantErr    string
	}{
		{"", "static", ""}, {"exclusive", "dynamic", ""}, {"consumable", "static", ""}, {"consumable", "off", ""},
		{"mps", "static", `must be "exclusive" or "consumable"`}, {"Consumable", "static", `must be "exclusive" or "consumable"`},
		{"consumable", "dynamic", "--gpu-sharing=consumable cannot be combined with --mig=dynamic"},
	} {
		o := &Options{NodeName: "n", MaxDevicesPerSlice: 128, GPUSharing: tc.value, MIG: tc.mig}
		err := o.Validate()
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.value)
		} else {
			require.NoError(t, err, tc.value)
		}
	}
	require.True(t, (&Options{GPUSharing: SharingConsumable}).sliceOptions().ConsumableMemory)
	require.False(t, (&Options{GPUSharing: SharingExclusive}).sliceOptions().ConsumableMemory)
}

func TestSharingToolResolution(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755))
	smi := filepath.Join(root, "usr", "bin", "nvidia-smi")
	require.NoError(t, os.WriteFile(smi, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", t.TempDir())

	real := &Options{NvidiaDriverRoot: root}
	require.Equal(t, smi, real.tool("", "nvidia-smi", fakeNvidiaSMI), "found under the driver root")
	require.Empty(t, real.tool("", "nvidia-cuda-mps-control", fakeMPSControl), "missing everywhere: prepares that need it fail")
	require.Equal(t, "/opt/x", real.tool("/opt/x", "nvidia-smi", fakeNvidiaSMI), "the flag wins")

	// Simulated: only the fake next to the plugin binary (the test binary
	// here, which has none) is used, never the host's tools.
	sim := &Options{NvidiaDriverRoot: root, Simulate: "dgx-h100"}
	require.Empty(t, sim.tool("", "nvidia-smi", fakeNvidiaSMI))
}
