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
	// GKE's driver root (/home/kubernetes/bin/nvidia) has bin/ and lib64/.
	gke := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(gke, "bin"), 0o755))
	gkeSMI := filepath.Join(gke, "bin", "nvidia-smi")
	require.NoError(t, os.WriteFile(gkeSMI, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", t.TempDir())
	// The working directory holds usr/bin/nvidia-smi too: an empty driver
	// root is /, never the working directory.
	t.Chdir(root)
	if _, err := os.Stat("/usr/bin/nvidia-smi"); err == nil {
		t.Skip("this machine has /usr/bin/nvidia-smi")
	}
	tests := []struct {
		name, driverRoot, flag, tool, want string
	}{
		{name: "found under the driver root", driverRoot: root, tool: "nvidia-smi", want: smi},
		{name: "the driver root as given, uncleaned", driverRoot: root + "/./", tool: "nvidia-smi", want: smi},
		{name: "missing everywhere: prepares that need it fail", driverRoot: root, tool: "nvidia-cuda-mps-control", want: ""},
		{name: "the flag wins", driverRoot: root, flag: "/opt/x", tool: "nvidia-smi", want: "/opt/x"},
		{name: "GKE's bin/", driverRoot: gke, tool: "nvidia-smi", want: gkeSMI},
		{name: "an empty driver root is /, not the working directory", driverRoot: "", tool: "nvidia-smi", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{NvidiaDriverRoot: tc.driverRoot}
			require.Equal(t, tc.want, o.tool(tc.flag, tc.tool))
		})
	}
}
