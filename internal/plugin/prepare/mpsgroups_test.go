package prepare

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/test/fakegpu"
)

// twoGroupClaim has two requests whose MPS configurations differ
// (percentages 20 and 50), as NVIDIA's driver serves with two daemons.
func twoGroupClaim() *resourceapi.ResourceClaim {
	return claim(uidA, "mps2", []alloc{{request: "a", device: "gpu-0"}, {request: "b", device: "gpu-1"}},
		opaque(resourceapi.AllocationConfigSourceClaim, params(`{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":20}}`), "a"),
		opaque(resourceapi.AllocationConfigSourceClaim, params(`{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50}}`), "b"))
}

// TestMPSDaemonPerConfigGroup: a claim whose requests' MPS configurations
// differ gets a daemon per group, each with its own percentage; each
// device's container env points at its own group's pipe directory; a
// restarted plugin adopts both and restarts one that died; unprepare stops
// both and removes their directories.
func TestMPSDaemonPerConfigGroup(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	c := twoGroupClaim()
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	rec, err := m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	daemons := rec.MPSDaemons()
	require.Len(t, daemons, 2)
	require.Equal(t, filepath.Join(e.mpsRoot, uidA), daemons[0].Dir, "group 0 keeps the claim's directory")
	require.Equal(t, filepath.Join(e.mpsRoot, uidA, "group-1"), daemons[1].Dir)
	for i, want := range []struct {
		uuid string
		pct  int
	}{{e.node.GPUs[0].UUID, 20}, {e.node.GPUs[1].UUID, 50}} {
		require.Equal(t, i, daemons[i].Group)
		require.Equal(t, []string{want.uuid}, daemons[i].Devices)
		st := waitMPSState(t, filepath.Join(daemons[i].Dir, "log"), func(s *fakegpu.MPSState) bool { return s.ActiveThreadPercentage != 0 })
		require.Equal(t, want.pct, st.ActiveThreadPercentage)
		require.Equal(t, []string{want.uuid}, st.Devices)
	}

	var s cdispec.Spec
	b, err := os.ReadFile(filepath.Join(e.cdiDir, cdi.SpecName(uidA)+".json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &s))
	require.Len(t, s.Devices, 2)
	for i, pct := range []string{"20", "50"} {
		edits := s.Devices[i].ContainerEdits
		require.Contains(t, edits.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+pct)
		require.Len(t, edits.Mounts, 3, "one daemon's directories per device")
		require.Equal(t, filepath.Join(daemons[i].Dir, "pipe"), edits.Mounts[0].HostPath)
	}

	// A restarted plugin adopts both; one that died is started again alone.
	pid0, pid1 := daemons[0].PID, daemons[1].PID
	require.NoError(t, syscall.Kill(pid1, syscall.SIGKILL))
	require.Eventually(t, func() bool { return !processAlive(pid1) }, 10*time.Second, 10*time.Millisecond)
	m2, rep := e.manager()
	require.Equal(t, 1, rep.Restored)
	require.Empty(t, rep.Failed)
	rec2, err := m2.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	d2 := rec2.MPSDaemons()
	require.Len(t, d2, 2)
	require.Equal(t, pid0, d2[0].PID, "group 0 adopted")
	require.NotEqual(t, pid1, d2[1].PID, "group 1 started again")
	st := waitMPSState(t, filepath.Join(d2[1].Dir, "log"), func(s *fakegpu.MPSState) bool { return s.PID == d2[1].PID && s.ActiveThreadPercentage != 0 })
	require.Equal(t, 50, st.ActiveThreadPercentage)
	evs := e.takeMPSEvents()
	require.Len(t, evs, 1)
	require.Equal(t, 1, evs[0].Group)

	require.NoError(t, m2.Unprepare(ctx(t), ref(c)))
	for _, pid := range []int{pid0, d2[1].PID} {
		require.Eventually(t, func() bool { return !processAlive(pid) }, 10*time.Second, 10*time.Millisecond)
	}
	require.NoDirExists(t, filepath.Join(e.mpsRoot, uidA))
}

// TestMPSGroupsOfAnInterruptedPrepareAreStopped: a crash after both
// groups' daemons started but before the claim was complete leaves a
// record without them; the rollback at the next start stops both.
func TestMPSGroupsOfAnInterruptedPrepareAreStopped(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	defer func() { testHookAfter = nil }()
	testHookAfter = func(phase string) {
		if phase == phaseCDIWritten {
			panic("crash")
		}
	}
	require.Panics(t, func() { _, _ = m.Prepare(ctx(t), twoGroupClaim()) })
	testHookAfter = nil
	pid0 := readPID(t, filepath.Join(e.mpsRoot, uidA))
	pid1 := readPID(t, filepath.Join(e.mpsRoot, uidA, "group-1"))
	require.True(t, processAlive(pid0))
	require.True(t, processAlive(pid1))

	_, rep := e.manager()
	require.Equal(t, 1, rep.RolledBack)
	for _, pid := range []int{pid0, pid1} {
		require.Eventually(t, func() bool { return !processAlive(pid) }, 10*time.Second, 10*time.Millisecond)
	}
	require.NoDirExists(t, filepath.Join(e.mpsRoot, uidA))
}

// TestComputeModeOfEveryMPSGroup: each GPU of every configuration group is
// EXCLUSIVE_PROCESS while the claim is prepared, and back in its mode after.
func TestComputeModeOfEveryMPSGroup(t *testing.T) {
	e := newEnv(t, 2)
	gpu0, gpu1 := e.node.GPUs[0].UUID, e.node.GPUs[1].UUID
	e.modes = &recordingModes{mode: map[string]nvml.ComputeMode{gpu0: nvml.COMPUTEMODE_DEFAULT, gpu1: nvml.COMPUTEMODE_DEFAULT}}
	m, _ := e.manager()
	c := twoGroupClaim()
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	for _, g := range []string{gpu0, gpu1} {
		require.Equal(t, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, e.modes.get(g), "while prepared")
	}
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	for _, g := range []string{gpu0, gpu1} {
		require.Equal(t, nvml.COMPUTEMODE_DEFAULT, e.modes.get(g), "after unprepare")
	}
}
