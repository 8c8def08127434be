//go:build failpoints

package failpoint

import (
	"testing"

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
