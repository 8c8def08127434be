package plugin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

func TestValidateSharing(t *testing.T) {
	memory := slice.ConsumableShares{Mode: slice.SharesMemory}
	for _, tc := range []struct {
		name, gpuSharing, shares, mig string
		want                          slice.ConsumableShares
		wantErr                       string
	}{
		{name: "defaults", mig: "static"},
		{name: "disabled", shares: "disabled", mig: "dynamic"},
		{name: "exclusive", gpuSharing: "exclusive", mig: "dynamic"},
		{name: "memory", shares: "memory", mig: "static", want: memory},
		{name: "unlimited", shares: "unlimited", mig: "off", want: slice.ConsumableShares{Mode: slice.SharesUnlimited}},
		{name: "a count", shares: "4", mig: "static", want: slice.ConsumableShares{Mode: slice.SharesUnlimited, Count: 4}},
		{name: "the deprecated alias", gpuSharing: "consumable", mig: "static", want: memory},
		{name: "the alias with the same mode", gpuSharing: "consumable", shares: "memory", mig: "off", want: memory},
		{name: "the alias against another mode", gpuSharing: "consumable", shares: "unlimited", mig: "static",
			wantErr: "--gpu-sharing=consumable is the deprecated form of --consumable-shares=memory and conflicts with --consumable-shares=unlimited"},
		{name: "the alias against disabled", gpuSharing: "consumable", shares: "disabled", mig: "static", wantErr: "conflicts with --consumable-shares=disabled"},
		{name: "the alias against a count", gpuSharing: "consumable", shares: "2", mig: "static", wantErr: "conflicts with --consumable-shares=2"},
		{name: "a bad --gpu-sharing", gpuSharing: "mps", mig: "static", wantErr: `--gpu-sharing="mps": must be "exclusive" or "consumable"`},
		{name: "a bad --consumable-shares", shares: "0", mig: "static", wantErr: `--consumable-shares="0": must be "disabled", "memory", "unlimited" or a positive integer`},
		{name: "shares with dynamic MIG", shares: "unlimited", mig: "dynamic",
			wantErr: "--consumable-shares=unlimited cannot be combined with --mig=dynamic"},
		{name: "the alias with dynamic MIG", gpuSharing: "consumable", mig: "dynamic",
			wantErr: "--consumable-shares=memory cannot be combined with --mig=dynamic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{NodeName: "n", MaxDevicesPerSlice: 128, GPUSharing: tc.gpuSharing, ConsumableShares: tc.shares, MIG: tc.mig}
			err := o.Validate()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, o.sliceOptions().ConsumableShares)
		})
	}
}

// The flags parse into the options Validate reads, and the deprecation of
// --gpu-sharing is logged.
func TestConsumableSharesFlags(t *testing.T) {
	o := &Options{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--node-name=n", "--gpu-sharing=consumable"}))
	require.NoError(t, o.Validate())
	var buf bytes.Buffer
	o.logSharing(klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf)))))
	require.Contains(t, buf.String(), "Deprecated flag: --gpu-sharing=consumable is --consumable-shares=memory")
	require.Contains(t, buf.String(), `consumableShares="memory"`)

	o = &Options{}
	fs = pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--node-name=n", "--consumable-shares=8"}))
	require.NoError(t, o.Validate())
	buf.Reset()
	o.logSharing(klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf)))))
	require.NotContains(t, buf.String(), "Deprecated")
	require.Contains(t, buf.String(), `consumableShares="8"`)
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
