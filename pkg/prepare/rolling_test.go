package prepare

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
