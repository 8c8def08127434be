package computedomain

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestReadFabricMgmt(t *testing.T) {
	const devices = "Character devices:\n195 nvidia\n243 nvidia-caps\n\nBlock devices:\n"
	mode := os.FileMode(0o666)
	for _, tc := range []struct {
		name, devices, cap, hostDev string
		noCap                       bool
		want                        *cdispec.DeviceNode
		wantErr                     string
	}{
		{name: "as the driver writes it", devices: devices, cap: "DeviceFileMinor: 4\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
			hostDev: "/", want: &cdispec.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap4", Type: "c", Major: 243, Minor: 4, FileMode: &mode}},
		{name: "containerized driver", devices: devices, cap: "DeviceFileMinor: 4\n", hostDev: "/run/nvidia/driver",
			want: &cdispec.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap4", HostPath: "/run/nvidia/driver/dev/nvidia-caps/nvidia-cap4",
				Type: "c", Major: 243, Minor: 4, FileMode: &mode}},
		{name: "no capability", devices: devices, noCap: true, wantErr: "no such file"},
		{name: "no minor", devices: devices, cap: "DeviceFileMode: 256\n", wantErr: "has no DeviceFileMinor line"},
		{name: "bad minor", devices: devices, cap: "DeviceFileMinor: x\n", wantErr: `DeviceFileMinor "x" is not a minor number`},
		{name: "no nvidia-caps", devices: "Character devices:\n195 nvidia\n", cap: "DeviceFileMinor: 4\n",
			wantErr: "lists no such character device nvidia-caps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(proc, "devices"), []byte(tc.devices), 0o444))
			if !tc.noCap {
				require.NoError(t, os.MkdirAll(filepath.Join(proc, filepath.Dir(fabricMgmtCap)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(proc, fabricMgmtCap), []byte(tc.cap), 0o444))
			}
			got, err := ReadFabricMgmt(proc, tc.hostDev)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.noCap {
					require.ErrorIs(t, err, os.ErrNotExist)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
