package prepare

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
)

// During a rolling update two plugin processes serve one node and the
// kubelet may call either. Two Managers over the same directories stand in
// for them: locks and holders are on disk, so exclusivity holds across both.
func TestTwoProcessesNeverShareAnExclusiveGPU(t *testing.T) {
	e := newEnv(t, 1)
	m1, _ := e.manager()
	m2, _ := e.manager()
	const n = 8
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := 0; i < 2*n; i++ {
		m := m1
		if i%2 == 1 {
			m = m2
		}
		wg.Go(func() {
			_, errs[i] = m.Prepare(ctx(t), gpuClaim(fmt.Sprintf("dddddddd-0000-0000-0000-%012d", i), fmt.Sprintf("c%d", i), "gpu-0"))
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
			continue
		}
		require.ErrorIs(t, err, ErrConflict)
	}
	require.Equal(t, 1, wins)
}

// A claim prepared by one process is unprepared by the other, and the
// first process then serves a new claim on the freed GPU.
func TestUnprepareThroughTheOtherProcess(t *testing.T) {
	e := newEnv(t, 1)
	m1, _ := e.manager()
	m2, _ := e.manager()
	a := gpuClaim(uidA, "a", "gpu-0")
	_, err := m1.Prepare(ctx(t), a)
	require.NoError(t, err)
	_, err = m2.Prepare(ctx(t), gpuClaim(uidB, "b", "gpu-0"))
	require.ErrorIs(t, err, ErrConflict, "the new process sees the old one's claim")
	require.NoError(t, m2.Unprepare(ctx(t), ref(a)))
	_, err = m1.Prepare(ctx(t), gpuClaim(uidB, "b", "gpu-0"))
	require.NoError(t, err)
}

// A new process starting while the old one is in the middle of a prepare
// must not roll that prepare back: Recover waits for the device lock and
// then sees the completed record.
func TestRecoverWaitsForAPrepareInFlight(t *testing.T) {
	e := newEnv(t, 1)
	m1, _ := e.manager()
	started, release := make(chan struct{}), make(chan struct{})
	testHookAfter = func(phase string) {
		if phase == phaseStarted {
			close(started)
			<-release
		}
	}
	defer func() { testHookAfter = nil }()
	prepared := make(chan error, 1)
	go func() {
		_, err := m1.Prepare(ctx(t), gpuClaim(uidA, "slow", "gpu-0"))
		prepared <- err
	}()
	<-started
	recovered := make(chan RecoverReport, 1)
	go func() {
		_, rep := e.manager()
		recovered <- rep
	}()
	select {
	case <-recovered:
		t.Fatal("Recover must wait for the prepare in flight")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-prepared)
	rep := <-recovered
	require.Equal(t, 1, rep.Restored)
	require.Zero(t, rep.RolledBack)
	specs, err := m1.cfg.CDI.ListClaims()
	require.NoError(t, err)
	require.Equal(t, []string{uidA}, specs)
}

// A prepare retried with another device set (after an interrupted attempt)
// must not leave the first attempt's device held.
func TestRetriedPrepareWithOtherDevicesReleasesTheOld(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	crash(t, phaseStarted, func() { _, _ = m.Prepare(ctx(t), gpuClaim(uidA, "a", "gpu-0")) })
	require.Equal(t, []string{uidA}, m.holders("gpu-0"))
	_, err := m.Prepare(ctx(t), gpuClaim(uidA, "a", "gpu-1"))
	require.NoError(t, err)
	require.Empty(t, m.holders("gpu-0"))
	_, err = m.Prepare(ctx(t), gpuClaim(uidB, "b", "gpu-0"))
	require.NoError(t, err, "gpu-0 is free again")
}

// Right after a reboot both processes may start together. One removes the
// earlier boot's records and the kubelet prepares a claim again through it;
// the other, which read the earlier boot's records before they were pruned,
// must not then remove that claim's new CDI spec.
func TestStaleRecordSparesAClaimPreparedAgain(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	a := gpuClaim(uidA, "a", "gpu-0")
	_, err := m.Prepare(ctx(t), a)
	require.NoError(t, err)
	boot1 := m.cfg.Checkpoints.Dir()
	seen := t.TempDir()
	require.NoError(t, os.CopyFS(seen, os.DirFS(boot1)))

	e.bootID = "boot-2"
	m1, rep := e.manager()
	require.Equal(t, 1, rep.Stale)
	// The second process reads the earlier boot's records before the
	// first one pruned them: put them back for it.
	require.NoError(t, os.CopyFS(boot1, os.DirFS(seen)))
	prepared := prepareDuringSpecRemoval(t, m1, a)
	e.manager()
	require.NoError(t, prepared())
	require.FileExists(t, m1.cfg.CDI.SpecPath(uidA), "the claim prepared in this boot keeps its spec")
}

// The start-up removal of CDI specs without a record takes the claim's
// lock: a prepare of the same claim by the other process (rolling update)
// either finished before — then the record exists — or waits, and its spec
// is never removed.
func TestOrphanCleanupSparesAConcurrentPrepare(t *testing.T) {
	e := newEnv(t, 1)
	m1, _ := e.manager()
	// A spec without a record, as a crash can leave.
	devs, err := m1.cdiDevices(newClaimState(&checkpoint.ClaimRecord{Devices: []checkpoint.Device{{Name: "gpu-0",
		UUID: e.node.GPUs[0].UUID, Requests: []string{"gpu"}}}}, nil))
	require.NoError(t, err)
	_, err = m1.cfg.CDI.WriteClaim(uidA, devs)
	require.NoError(t, err)
	prepared := prepareDuringSpecRemoval(t, m1, gpuClaim(uidA, "a", "gpu-0"))
	_, rep := e.manager()
	require.NoError(t, prepared())
	require.Equal(t, 1, rep.OrphanSpecs)
	require.FileExists(t, m1.cfg.CDI.SpecPath(uidA), "the prepared claim has its spec")
}

// prepareDuringSpecRemoval has m prepare c (another plugin process) at the
// moment the next Recover has decided to remove a spec of c, and gives it
// 200ms to finish before the removal goes on. The returned function waits
// for the prepare.
func prepareDuringSpecRemoval(t *testing.T, m *Manager, c *resourceapi.ResourceClaim) func() error {
	prepared := make(chan error, 1)
	var once sync.Once
	testHookRemoveSpec = func(uid string) {
		if uid != string(c.UID) {
			return
		}
		once.Do(func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, err := m.Prepare(ctx(t), c)
				prepared <- err
			}()
			select {
			case <-done:
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
	t.Cleanup(func() { testHookRemoveSpec = nil })
	return func() error {
		testHookRemoveSpec = nil
		return <-prepared
	}
}
