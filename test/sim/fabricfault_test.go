package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFabricFaults(t *testing.T) {
	got, err := ParseFaults("gpu-0 fabric in-progress\nGPU-x fabric completed TIMEOUT # failed\n")
	require.NoError(t, err)
	assert.Equal(t, []Fault{{GPU: "gpu-0", Kind: "fabric", FabricState: "in-progress"},
		{GPU: "GPU-x", Kind: "fabric", FabricState: "completed", FabricStatus: "TIMEOUT"}}, got)
	assert.Equal(t, "gpu-0 fabric in-progress", got[0].String())
	assert.Equal(t, "GPU-x fabric completed TIMEOUT", got[1].String())
	for bad, want := range map[string]string{
		"gpu-0 fabric":                       "want '<gpu> xid",
		"gpu-0 fabric trained":               `fabric state "trained" is not one of completed, in-progress, not-started, not-supported`,
		"gpu-0 fabric completed BROKEN":      `fabric status "BROKEN" is not one of`,
		"gpu-0 fabric completed TIMEOUT now": "want '<gpu> xid",
	} {
		_, err := ParseFaults(bad)
		assert.ErrorContains(t, err, want, bad)
	}
}

// TestFaultFileFabric: a fabric line sets the GPU's registration while it
// is present; once the GPU's last fabric line is gone the profile's
// registration is reported again (completed with its cluster and clique).
// Fabric lines neither cause nor hold off a GPU reset.
func TestFaultFileFabric(t *testing.T) {
	s := fabricServer(t, "580.82.07", "gb200", fmt.Sprintf(", fabric: {clusterUUID: %s, cliqueID: 3}", testClusterUUID))
	d := firstGPU(t, s)
	id, _ := d.GetUUID()
	path := filepath.Join(t.TempDir(), "faults")
	ff := NewFaultFile(path, s)
	cluster := uuid.MustParse(testClusterUUID)
	type answer struct {
		state   nvml.GpuFabricState
		status  nvml.Return
		cluster uuid.UUID
		clique  uint32
		lost    bool
	}
	completed := answer{nvml.GPU_FABRIC_STATE_COMPLETED, nvml.SUCCESS, cluster, 3, false}
	for _, step := range []struct {
		file string
		want answer
	}{
		{"", completed},
		{"gpu-0 fabric not-started\n", answer{state: nvml.GPU_FABRIC_STATE_NOT_STARTED}},
		{"gpu-0 fabric in-progress\n", answer{state: nvml.GPU_FABRIC_STATE_IN_PROGRESS}},
		{"gpu-0 fabric in-progress\ngpu-0 lost\n", answer{state: nvml.GPU_FABRIC_STATE_IN_PROGRESS, lost: true}},
		{"gpu-0 fabric in-progress\n", answer{state: nvml.GPU_FABRIC_STATE_IN_PROGRESS}}, // reset: still in progress
		{"gpu-0 fabric in-progress\ngpu-0 fabric not-started\n", answer{state: nvml.GPU_FABRIC_STATE_NOT_STARTED}},
		{"gpu-0 fabric in-progress\n", answer{state: nvml.GPU_FABRIC_STATE_IN_PROGRESS}}, // the last line wins
		{"gpu-0 lost\n", answer{state: nvml.GPU_FABRIC_STATE_COMPLETED, status: nvml.SUCCESS, cluster: cluster, clique: 3, lost: true}},
		{"", completed},
		{id + " fabric completed TIMEOUT\n", answer{nvml.GPU_FABRIC_STATE_COMPLETED, nvml.ERROR_TIMEOUT, cluster, 3, false}},
		{"gpu-0 thermal\n", completed},
	} {
		require.NoError(t, os.WriteFile(path, []byte(step.file), 0o600))
		require.NoError(t, ff.Sync(), step.file)
		_, ret := d.GetMemoryInfo()
		assert.Equal(t, step.want.lost, ret == nvml.ERROR_GPU_IS_LOST, "%q: lost", step.file)
		if step.want.lost {
			continue
		}
		v1, ret := d.GetGpuFabricInfo()
		require.Equal(t, nvml.SUCCESS, ret, step.file)
		v3, ret := d.GpuFabricInfoV(FabricInfoV3)
		require.Equal(t, nvml.SUCCESS, ret, step.file)
		for _, got := range []answer{{nvml.GpuFabricState(v1.State), nvml.Return(v1.Status), v1.ClusterUuid, v1.CliqueId, false},
			{nvml.GpuFabricState(v3.State), nvml.Return(v3.Status), v3.ClusterUuid, v3.CliqueId, false}} {
			assert.Equal(t, step.want, got, "%q", step.file)
		}
	}
}

func TestFaultFileFabricWithoutFabric(t *testing.T) {
	s := fabricServer(t, "580.82.07", "h100-sxm5-80gb", "")
	path := filepath.Join(t.TempDir(), "faults")
	require.NoError(t, os.WriteFile(path, []byte("gpu-0 fabric in-progress\n"), 0o600))
	assert.ErrorContains(t, NewFaultFile(path, s).Sync(), "has no NVLink fabric (the model's gpuFabric is false)")
}
