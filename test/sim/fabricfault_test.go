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

func TestParseFabricCliqueHealthFaults(t *testing.T) {
	got, err := ParseFaults("gpu-0 fabric-clique 7\ngpu-1 fabric-health route-recovery degraded-bandwidth\ngpu-2 fabric-health none\n")
	require.NoError(t, err)
	assert.Equal(t, []Fault{{GPU: "gpu-0", Kind: "fabric-clique", FabricClique: 7},
		{GPU: "gpu-1", Kind: "fabric-health", FabricHealth: []string{"degraded-bandwidth", "route-recovery"}},
		{GPU: "gpu-2", Kind: "fabric-health", FabricHealth: []string{}}}, got)
	assert.Equal(t, "gpu-0 fabric-clique 7", got[0].String())
	assert.Equal(t, "gpu-1 fabric-health degraded-bandwidth route-recovery", got[1].String())
	assert.Equal(t, "gpu-2 fabric-health none", got[2].String())
	for bad, want := range map[string]string{
		"gpu-0 fabric-clique":             "want '<gpu> xid",
		"gpu-0 fabric-clique -1":          `"-1" is not an unsigned 32-bit clique ID`,
		"gpu-0 fabric-clique 4294967296":  `"4294967296" is not an unsigned 32-bit clique ID`,
		"gpu-0 fabric-clique 1 2":         "want '<gpu> xid",
		"gpu-0 fabric-health":             "want '<gpu> xid",
		"gpu-0 fabric-health slow":        `fabric health "slow" is not none or one of access-timeout-recovery, degraded-bandwidth`,
		"gpu-0 fabric-health none slow":   `fabric health "none" is not none or one of`,
		"gpu-0 fabric-health none none":   `fabric health "none" is not none`,
		"gpu-0 fabric-health degraded bw": `fabric health "degraded" is not`,
	} {
		_, err := ParseFaults(bad)
		assert.ErrorContains(t, err, want, bad)
	}
}

// TestFaultFileFabricCliqueHealth: fabric-clique and fabric-health lines
// change the clique ID and the health mask a GPU reports while they are
// present, combined with a fabric line; the clique shows only once the
// registration completed, as the profile's does. Without the lines the
// profile's clique and health are reported again.
func TestFaultFileFabricCliqueHealth(t *testing.T) {
	s := fabricServer(t, "580.82.07", "gb200", fmt.Sprintf(", fabric: {clusterUUID: %s, cliqueID: 3, health: [route-recovery]}", testClusterUUID))
	d := firstGPU(t, s)
	path := filepath.Join(t.TempDir(), "faults")
	ff := NewFaultFile(path, s)
	cluster := uuid.MustParse(testClusterUUID)
	type answer struct {
		state    nvml.GpuFabricState
		cluster  uuid.UUID
		clique   uint32
		degraded uint32 // the health mask's DEGRADED_BW field
		recovery uint32 // ROUTE_RECOVERY
	}
	const yes, no = nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE
	profile := answer{nvml.GPU_FABRIC_STATE_COMPLETED, cluster, 3, no, yes}
	for _, step := range []struct {
		file string
		want answer
	}{
		{"", profile},
		{"gpu-0 fabric-health degraded-bandwidth\n", answer{nvml.GPU_FABRIC_STATE_COMPLETED, cluster, 3, yes, no}},
		{"gpu-0 fabric-health none\n", answer{nvml.GPU_FABRIC_STATE_COMPLETED, cluster, 3, no, no}},
		{"gpu-0 fabric-clique 9\n", answer{nvml.GPU_FABRIC_STATE_COMPLETED, cluster, 9, no, yes}},
		{"gpu-0 fabric-clique 9\ngpu-0 fabric in-progress\n", answer{state: nvml.GPU_FABRIC_STATE_IN_PROGRESS, degraded: no, recovery: yes}},
		{"gpu-0 fabric-clique 9\ngpu-0 fabric completed\ngpu-0 fabric-health degraded-bandwidth route-recovery\n",
			answer{nvml.GPU_FABRIC_STATE_COMPLETED, cluster, 9, yes, yes}},
		{"gpu-0 fabric-clique 9\ngpu-0 fabric-clique 4\n", answer{nvml.GPU_FABRIC_STATE_COMPLETED, cluster, 4, no, yes}}, // the last line wins
		{"gpu-0 thermal\n", profile},
	} {
		require.NoError(t, os.WriteFile(path, []byte(step.file), 0o600))
		require.NoError(t, ff.Sync(), step.file)
		v3, ret := d.GpuFabricInfoV(FabricInfoV3)
		require.Equal(t, nvml.SUCCESS, ret, step.file)
		got := answer{nvml.GpuFabricState(v3.State), v3.ClusterUuid, v3.CliqueId,
			healthField(v3.HealthMask, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW),
			healthField(v3.HealthMask, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY)}
		assert.Equal(t, step.want, got, "%q", step.file)
		v1, ret := d.GetGpuFabricInfo()
		require.Equal(t, nvml.SUCCESS, ret, step.file)
		assert.Equal(t, step.want.clique, v1.CliqueId, "%q: unversioned call", step.file)
	}
	require.ErrorContains(t, s.SetFabricOverride(firstUUID(t, d), FabricOverride{Health: []string{"slow"}}), `fabric health "slow" is not one of`)
}

func firstUUID(t *testing.T, d *device) string {
	t.Helper()
	id, ret := d.GetUUID()
	require.Equal(t, nvml.SUCCESS, ret)
	return id
}
