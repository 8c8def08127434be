package cdi

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// TestVFIOClaimDevices: a passed-through GPU gets its /dev/vfio nodes only;
// a claim of such GPUs alone gets none of the driver's edits, a mixed one
// keeps them for its other devices.
func TestVFIOClaimDevices(t *testing.T) {
	mode := os.FileMode(0o666)
	nodes := []*cdispec.DeviceNode{
		{Path: "/dev/vfio/41", Type: "c", Major: 124, Minor: 41, FileMode: &mode},
		{Path: "/dev/vfio/vfio", Type: "c", Major: 124, Minor: 255, FileMode: &mode},
	}
	vfioDev := ClaimDevice{DeviceName: "gpu-vfio-3", VFIO: nodes}
	tests := []struct {
		name      string
		devices   []ClaimDevice
		inject    []string
		wantNodes []string
		wantNoCtl bool
		wantNoEnv bool
	}{
		{name: "vfio only", devices: []ClaimDevice{vfioDev}, inject: []string{DeviceID(uid, "gpu-vfio-3")},
			wantNodes: []string{"/dev/vfio/41", "/dev/vfio/vfio"}, wantNoCtl: true, wantNoEnv: true},
		{name: "vfio beside a GPU", devices: []ClaimDevice{
			{DeviceName: "gpu-0", GPU: &gpus[0], RequestUUIDs: []string{gpus[0].UUID}}, vfioDev},
			inject:    []string{DeviceID(uid, "gpu-0"), DeviceID(uid, "gpu-vfio-3")},
			wantNodes: []string{"/dev/nvidiactl", "/dev/nvidia0", "/dev/vfio/41", "/dev/vfio/vfio"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t)
			_, err := w.WriteClaim(uid, tc.devices)
			require.NoError(t, err)
			spec := inject(t, w.Dir(), tc.inject...)
			var got []string
			for _, d := range spec.Linux.Devices {
				got = append(got, d.Path)
			}
			for _, p := range tc.wantNodes {
				require.Contains(t, got, p)
			}
			if tc.wantNoCtl {
				require.NotContains(t, got, "/dev/nvidiactl")
			}
			if tc.wantNoEnv {
				require.Empty(t, spec.Process.Env, "no GPU identity or driver environment for a passed-through GPU")
			}
		})
	}
}
