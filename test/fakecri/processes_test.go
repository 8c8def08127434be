package fakecri

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpudra/gpudra/pkg/nvmllib/sim"
)

// TestSimulatedGPUProcesses: a running container with GPUs is a simulated
// GPU process from StartContainer to StopContainer (or RemoveContainer); a
// container without GPUs is none; a new runtime clears earlier records.
func TestSimulatedGPUProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "processes")
	require.NoError(t, sim.WriteProcess(dir, "stale", sim.Process{Devices: []string{"GPU-old"}}))
	env := startRuntime(t, Options{ProcessDir: dir})
	procs := func() map[string]sim.Process {
		t.Helper()
		p, err := sim.ReadProcesses(dir)
		require.NoError(t, err)
		return p
	}
	assert.Empty(t, procs(), "records of an earlier runtime are gone")

	writeSpec(t, env.cdiDir, "uid1", gpuDevice("uid1", 3, "GPU-abc"),
		gpuDevice("uid1", 4, "MIG-def", "GPUDRA_MIG_4_2_0=MIG-def"))
	sandboxID, sandbox := env.runPod(t, "ns1", "pod1")
	withGPUs, err := env.createContainer(sandboxID, sandbox, "main", nil, deviceID("uid1", 3), deviceID("uid1", 4))
	require.NoError(t, err)
	plain, err := env.createContainer(sandboxID, sandbox, "sidecar", nil)
	require.NoError(t, err)
	assert.Empty(t, procs(), "created is not running")

	env.startAndWaitRunning(t, withGPUs.ContainerId)
	env.startAndWaitRunning(t, plain.ContainerId)
	assert.Equal(t, map[string]sim.Process{withGPUs.ContainerId: {Name: "ns1/pod1/main",
		Devices: []string{"GPU-abc", "MIG-def"}}}, procs())

	_, err = env.client.StopContainer(env.ctx, &runtimeapi.StopContainerRequest{ContainerId: withGPUs.ContainerId})
	require.NoError(t, err)
	assert.Empty(t, procs(), "a stopped container uses no GPU")

	env.startAndWaitRunning(t, withGPUs.ContainerId)
	require.Len(t, procs(), 1)
	_, err = env.client.RemoveContainer(env.ctx, &runtimeapi.RemoveContainerRequest{ContainerId: withGPUs.ContainerId})
	require.NoError(t, err)
	assert.Empty(t, procs())
}
