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

	o := &Options{NvidiaDriverRoot: root}
	require.Equal(t, smi, o.tool("", "nvidia-smi"), "found under the driver root")
	require.Empty(t, o.tool("", "nvidia-cuda-mps-control"), "missing everywhere: prepares that need it fail")
	require.Equal(t, "/opt/x", o.tool("/opt/x", "nvidia-smi"), "the flag wins")
}
