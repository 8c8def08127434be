//go:build failpoints

package failpoint

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	a, err := Parse("prepare/PrepareStarted=crash, unprepare/CDIRemoved=sleep(20),prepare/CDIWritten=crash-after(3)")
	require.NoError(t, err)
	require.Equal(t, "crash", a[PrepareStarted].kind)
	require.Equal(t, 1, a[PrepareStarted].after)
	require.Equal(t, 20, a[UnprepareCDIRemoved].arg)
	require.Equal(t, 3, a[PrepareCDIWritten].after)
	for _, bad := range []string{"x", "x=boom", "x=sleep(-1)", "x=crash-after(0)", "x=sleep(a)"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
}

func TestInjectCrashAfter(t *testing.T) {
	killed := 0
	kill = func() { killed++ }
	once.Do(func() {})
	actions, _ = Parse("p=crash-after(2)")
	Inject("p")
	require.Zero(t, killed)
	Inject("p")
	require.Equal(t, 1, killed)
	Inject("p")
	require.Equal(t, 1, killed, "crashes once")
	Inject("other")
}

func TestParseSleepCrash(t *testing.T) {
	a, err := Parse("r=sleep-crash(5)")
	require.NoError(t, err)
	require.Equal(t, "sleep-crash", a["r"].kind)
	require.Equal(t, 5, a["r"].arg)
	require.Equal(t, 1, a["r"].after)
	for _, bad := range []string{"r=sleep-crash(-1)", "r=sleep-crash(x)", "r=sleep-crash()"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
}

// A failpoint armed through the file fires once: the crash removes the file
// (the restarted process comes up unarmed), a new content arms it afresh,
// and a removed or unreadable file arms nothing.
func TestFileArmsOnce(t *testing.T) {
	killed := 0
	kill = func() { killed++ }
	t.Cleanup(func() { kill = crash })
	once.Do(func() {})
	actions = map[string]*action{"p": {kind: "crash", after: 1}} // the environment's, overridden by the file
	file := filepath.Join(t.TempDir(), "failpoints")
	t.Setenv(FileEnvVar, file)

	Inject("q")
	require.Equal(t, 0, killed, "no file: the environment's failpoints only")
	Inject("p")
	require.Equal(t, 1, killed)

	require.NoError(t, os.WriteFile(file, []byte("p=crash-after(2), q=sleep(1)"), 0o600))
	Inject("p")
	Inject("q")
	require.Equal(t, 1, killed, "the file's crash-after(2) replaces the environment's crash")
	Inject("p")
	require.Equal(t, 2, killed)
	require.NoFileExists(t, file, "the crash disarms the file")
	Inject("p")
	require.Equal(t, 2, killed, "the environment's crash fired already")

	require.NoError(t, os.WriteFile(file, []byte("p=crash-after(2)"), 0o600))
	Inject("p")
	require.NoError(t, os.WriteFile(file, []byte("p=crash-after(1)"), 0o600))
	Inject("p")
	require.Equal(t, 3, killed, "a new content counts from zero")

	require.NoError(t, os.WriteFile(file, []byte("p=boom"), 0o600))
	Inject("p")
	require.Equal(t, 3, killed, "an invalid file arms nothing")
	require.FileExists(t, file)
}

func TestSleepCrash(t *testing.T) {
	killed := 0
	kill = func() { killed++ }
	t.Cleanup(func() { kill = crash })
	once.Do(func() {})
	actions, _ = Parse("r=sleep-crash(30)")
	t.Setenv(FileEnvVar, "")
	start := time.Now()
	Inject("r")
	require.Equal(t, 1, killed)
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
	Inject("r")
	require.Equal(t, 1, killed, "crashes once")
}
