package prepare

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
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
