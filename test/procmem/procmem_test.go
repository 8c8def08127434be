package procmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOwnProcess reads this test's own process: a Go program has resident
// anonymous memory and maps its own binary; an unknown field or a process
// that does not exist is an error.
func TestOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	pid := os.Getpid()
	rss, err := Status(pid, "VmRSS")
	require.NoError(t, err)
	anon, err := Status(pid, "RssAnon")
	require.NoError(t, err)
	require.Positive(t, anon)
	require.Greater(t, rss, anon)
	_, err = Status(pid, "NoSuchField")
	require.ErrorContains(t, err, "no NoSuchField in /proc/")

	rollup, err := SmapsRollup(pid)
	require.NoError(t, err)
	require.InDelta(t, rss, rollup["Rss"], rss/2, "smaps_rollup's Rss and status' VmRSS describe the same pages")

	exe, err := os.Executable()
	require.NoError(t, err)
	mapped, err := Mapped(pid, filepath.Base(exe))
	require.NoError(t, err)
	require.Positive(t, mapped, "the test binary's own mappings are resident")
	none, err := Mapped(pid, "no-such-library.so")
	require.NoError(t, err)
	require.Zero(t, none)

	_, err = Status(1<<30, "VmRSS")
	require.Error(t, err)
}
