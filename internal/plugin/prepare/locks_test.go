package prepare

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
)

// A claim's lock excludes every other holder, in this process or another
// (each acquisition is its own file description), even though its file is
// removed and created again between holders.
func TestClaimLockExcludesWhileItsFileComesAndGoes(t *testing.T) {
	dir := t.TempDir()
	var inside, most int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		l, err := newDeviceLocks(dir) // one "process" each
		require.NoError(t, err)
		wg.Go(func() {
			for range 200 {
				unlock, err := l.lockClaim(uidA, func() bool { return false })
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				inside--
				mu.Unlock()
				unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, most)
	entries, err := os.ReadDir(filepath.Join(dir, claimLockDir))
	require.NoError(t, err)
	require.Empty(t, entries, "no lock file is left behind")
}

// A claim's lock file lives as long as its record: none is left per
// unprepared claim, and a restart removes those a crash left.
func TestClaimLockFilesGoWithTheClaim(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	files := func() []string {
		entries, err := os.ReadDir(filepath.Join(e.lockDir, claimLockDir))
		require.NoError(t, err)
		var names []string
		for _, en := range entries {
			names = append(names, en.Name())
		}
		return names
	}
	c := gpuClaim(uidA, "a", "gpu-0")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Equal(t, []string{uidA + ".lock"}, files())
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	require.Empty(t, files())

	require.NoError(t, os.WriteFile(filepath.Join(e.lockDir, claimLockDir, uidB+".lock"), nil, 0o600))
	e.manager()
	require.Empty(t, files())
}

// The release of a claim's lock keeps its file exactly while the claim has a
// record, whether the prepare or unprepare that held it knew the outcome
// (it wrote or removed the record) or not (a failure, then the record is
// read again).
func TestClaimLockFileFollowsTheRecord(t *testing.T) {
	specPath := func(e *env, uid string) string {
		return filepath.Join(e.cdiDir, cdi.SpecName(uid)+".json")
	}
	for _, tc := range []struct {
		name string
		// run prepares and unprepares on a fresh node; the claim under test is uidB.
		run        func(t *testing.T, e *env, m *Manager)
		wantRecord bool
	}{
		{"prepared", func(t *testing.T, e *env, m *Manager) {
			_, err := m.Prepare(ctx(t), gpuClaim(uidB, "b", "gpu-0"))
			require.NoError(t, err)
		}, true},
		{"prepared twice", func(t *testing.T, e *env, m *Manager) {
			for range 2 {
				_, err := m.Prepare(ctx(t), gpuClaim(uidB, "b", "gpu-0"))
				require.NoError(t, err)
			}
		}, true},
		{"refused before any record: the GPU is another claim's", func(t *testing.T, e *env, m *Manager) {
			_, err := m.Prepare(ctx(t), gpuClaim(uidA, "a", "gpu-0"))
			require.NoError(t, err)
			_, err = m.Prepare(ctx(t), gpuClaim(uidB, "b", "gpu-0"))
			require.ErrorIs(t, err, ErrConflict)
		}, false},
		{"failed after its record, rolled back", func(t *testing.T, e *env, m *Manager) {
			// A directory where the spec goes: the CDI write's rename fails.
			require.NoError(t, os.MkdirAll(specPath(e, uidB), 0o700))
			_, err := m.Prepare(ctx(t), gpuClaim(uidB, "b", "gpu-0"))
			require.Error(t, err)
		}, false},
		{"unprepared", func(t *testing.T, e *env, m *Manager) {
			c := gpuClaim(uidB, "b", "gpu-0")
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
		}, false},
		{"unprepared without ever being prepared", func(t *testing.T, e *env, m *Manager) {
			require.NoError(t, m.Unprepare(ctx(t), ref(gpuClaim(uidB, "b", "gpu-0"))))
		}, false},
		{"unprepare failed: its spec cannot be removed", func(t *testing.T, e *env, m *Manager) {
			c := gpuClaim(uidB, "b", "gpu-0")
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			p := specPath(e, uidB)
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.MkdirAll(filepath.Join(p, "x"), 0o700)) // a non-empty directory
			require.Error(t, m.Unprepare(ctx(t), ref(c)))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			m, _ := e.manager()
			tc.run(t, e, m)
			rec, err := m.cfg.Checkpoints.Get(uidB)
			require.NoError(t, err)
			require.Equal(t, tc.wantRecord, rec != nil, "record of the claim")
			_, err = os.Stat(filepath.Join(e.lockDir, claimLockDir, uidB+".lock"))
			require.Equal(t, tc.wantRecord, err == nil, "lock file of the claim (stat: %v)", err)
		})
	}
}
