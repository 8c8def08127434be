package libtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestFabricInfo: go-nvml's fabric calls through the library, as the
// plugin makes them: the versioned call's v2 and v3 structs come back
// whole (version, UUID, clique, state, health) where the driver has them,
// GPUs without a fabric answer NOT_SUPPORTED, and a driver older than R550
// answers the versioned call FUNCTION_NOT_FOUND while the unversioned one
// still answers.
func TestFabricInfo(t *testing.T) {
	old := filepath.Join(t.TempDir(), "gb200-r535.yaml")
	require.NoError(t, os.WriteFile(old, []byte(`driverVersion: "535.183.01"
cudaDriverVersion: "12.2"
gpus:
  - {model: gb200, fabric: {clusterUUID: 6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44, cliqueID: 3, health: [degraded-bandwidth]}}
`), 0o644))
	rack := uuid.MustParse("6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44")
	tests := []struct {
		profile    string
		v1, v2, v3 nvml.Return
		clique     uint32
		degraded   uint32 // the health mask's degraded-bandwidth field
	}{
		{"gb200-nvl72-tray", nvml.SUCCESS, nvml.SUCCESS, nvml.SUCCESS, 1, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE},
		{"l4", nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, 0, 0},
		{"hgx-b200", nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, 0, 0},
		{old, nvml.SUCCESS, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_FUNCTION_NOT_FOUND, 3, 0},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.profile), func(t *testing.T) {
			lib := open(t, newRoot(t, tc.profile))
			d, ret := lib.DeviceGetHandleByIndex(0)
			ok(t, ret)
			v1, ret := d.GetGpuFabricInfo()
			require.Equal(t, tc.v1, ret, "nvmlDeviceGetGpuFabricInfo")
			v2, ret := d.GetGpuFabricInfoV().V2()
			require.Equal(t, tc.v2, ret, "nvmlDeviceGetGpuFabricInfoV v2")
			v3, ret := d.GetGpuFabricInfoV().V3()
			require.Equal(t, tc.v3, ret, "nvmlDeviceGetGpuFabricInfoV v3")
			if tc.v1 == nvml.SUCCESS {
				require.Equal(t, uint8(nvml.GPU_FABRIC_STATE_COMPLETED), v1.State)
				require.Equal(t, [16]uint8(rack), v1.ClusterUuid)
				require.Equal(t, tc.clique, v1.CliqueId)
				require.Equal(t, uint32(nvml.SUCCESS), v1.Status)
			}
			if tc.v2 == nvml.SUCCESS {
				require.Equal(t, nvml.STRUCT_VERSION(v2, 2), v2.Version)
				require.Equal(t, v1.ClusterUuid, v2.ClusterUuid)
				require.Equal(t, v1.CliqueId, v2.CliqueId)
				require.Equal(t, v1.State, v2.State)
				require.Equal(t, tc.degraded, v2.HealthMask>>nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW&0x3)
			}
			if tc.v3 == nvml.SUCCESS {
				require.Equal(t, nvml.STRUCT_VERSION(v3, 3), v3.Version)
				require.Equal(t, v2.HealthMask, v3.HealthMask)
				require.Equal(t, uint8(nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY), v3.HealthSummary)
			}
		})
	}
}
