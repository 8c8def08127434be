package prepare

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/test/fakegpu"
)

const mpsConfig = `{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":40,"defaultPinnedDeviceMemoryLimit":"8Gi"}}`

// foreignPIDFile rewrites a daemon's pid file as a plugin instance in
// another PID namespace (another pod) writes it: the PID is not one of ours.
func foreignPIDFile(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "daemon.pid"), []byte("7\npid:[4026530000]\n"), 0o644))
}

// TestMPSDaemonOfPreparedClaim: whoever finds a prepared claim's daemon
// gone — recovery at start, a repeated prepare, the periodic check —
// starts it again with the claim's settings in the same directory, records
// its PID and reports it; a daemon that answers is adopted, also when its
// PID is one of another PID namespace.
func TestMPSDaemonOfPreparedClaim(t *testing.T) {
	tests := []struct {
		name string
		// kill the claim's daemon first.
		kill bool
		// foreign makes the daemon look started by another plugin pod.
		foreign bool
		// act finds the daemon gone (or not), as a plugin does.
		act func(t *testing.T, e *env, m *Manager) *Manager
		// wantRecovered is RecoverReport.MPSReplaced when act recovers.
		wantRecovered int
	}{
		{name: "recovery after a plugin restart", kill: true, wantRecovered: 1, act: restartManager},
		{name: "a repeated prepare", kill: true, act: prepareAgain},
		{name: "the periodic check", kill: true, act: func(t *testing.T, e *env, m *Manager) *Manager {
			require.Equal(t, 1, m.CheckMPSDaemons(ctx(t)))
			return m
		}},
		{name: "recovery adopts a daemon of another PID namespace", foreign: true, act: restartManager},
		{name: "the check adopts a daemon of another PID namespace", foreign: true, act: func(t *testing.T, e *env, m *Manager) *Manager {
			require.Zero(t, m.CheckMPSDaemons(ctx(t)))
			return m
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			m, _ := e.manager()
			c := configured(uidA, "mps", []alloc{{request: "gpu", device: "gpu-0"}}, mpsConfig)
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			rec, err := m.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			old := rec.MPS.PID
			logDir := filepath.Join(rec.MPS.Dir, "log")
			mount, err := os.Open(filepath.Join(rec.MPS.Dir, "pipe"))
			require.NoError(t, err)
			defer mount.Close()
			if tc.kill {
				require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
				require.Eventually(t, func() bool { return !processAlive(old) }, 10*time.Second, 10*time.Millisecond)
			}
			if tc.foreign {
				foreignPIDFile(t, rec.MPS.Dir)
				rec.MPS.PID = 7
				require.NoError(t, m.cfg.Checkpoints.Put(rec))
			}

			m = tc.act(t, e, m)

			rec2, err := m.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			evs := e.takeMPSEvents()
			st := waitMPSState(t, logDir, func(s *fakegpu.MPSState) bool { return len(s.PinnedMemLimits) == 1 })
			require.Equal(t, 40, st.ActiveThreadPercentage)
			if !tc.kill {
				require.Empty(t, evs, "adopted, not replaced")
				require.Equal(t, old, st.PID, "the daemon that ran is kept; no second one")
				require.Equal(t, 7, rec2.MPS.PID)
				require.Zero(t, m.mpsReplaced.Load())
				return
			}
			require.Len(t, evs, 1)
			require.Equal(t, MPSDaemonEvent{ClaimUID: uidA, Claim: "default/mps", OldPID: old, NewPID: rec2.MPS.PID,
				Reason: evs[0].Reason}, evs[0])
			require.Contains(t, evs[0].Reason, "does not answer")
			require.NotEqual(t, old, rec2.MPS.PID, "the new PID is recorded")
			require.Equal(t, rec2.MPS.PID, st.PID)
			require.Equal(t, int64(1), m.mpsReplaced.Load())
			names, err := mount.Readdirnames(-1)
			require.NoError(t, err)
			require.Contains(t, names, "control", "the new daemon listens in the directory the containers mount")

			// Found answering now: nothing more is reported.
			require.Zero(t, m.CheckMPSDaemons(ctx(t)))
			require.Empty(t, e.takeMPSEvents())
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			require.Eventually(t, func() bool { return !processAlive(rec2.MPS.PID) }, 10*time.Second, 10*time.Millisecond)
		})
	}
}

func restartManager(t *testing.T, e *env, _ *Manager) *Manager {
	m, rep := e.manager()
	require.Equal(t, 1, rep.Restored)
	require.Empty(t, rep.Failed)
	return m
}

func prepareAgain(t *testing.T, _ *env, m *Manager) *Manager {
	_, err := m.Prepare(ctx(t), configured(uidA, "mps", []alloc{{request: "gpu", device: "gpu-0"}}, mpsConfig))
	require.NoError(t, err)
	return m
}

// TestMPSOrphanOfAnotherInstance: the daemon of a claim without a record,
// started by a plugin instance whose PIDs this one cannot see, is stopped
// through its pipe at start-up, not just stripped of its directory (which
// would leave it running, unreachable, for good).
func TestMPSOrphanOfAnotherInstance(t *testing.T) {
	e := newEnv(t, 1)
	_, _ = e.manager()
	other, err := sharing.NewMPSControl(sharing.MPSOptions{ControlPath: fakeMPSControl(t), Root: e.mpsRoot, Env: fakeToolEnv(t)})
	require.NoError(t, err)
	d := &sharing.MPSDaemon{Devices: []string{e.node.GPUs[0].UUID}}
	require.NoError(t, other.Start(ctx(t), uidB, d))
	foreignPIDFile(t, d.Dir)

	_, rep := e.manager()
	require.Empty(t, rep.Failed)
	require.Eventually(t, func() bool { return !processAlive(d.PID) }, 10*time.Second, 10*time.Millisecond, "stopped through its pipe")
	require.NoDirExists(t, d.Dir)
}
