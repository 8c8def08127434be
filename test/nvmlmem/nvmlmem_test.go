package nvmlmem

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// TestMain makes this test binary the child, as the kit's binary is.
func TestMain(m *testing.M) {
	RunChild()
	os.Exit(m.Run())
}

func selfOptions(t *testing.T) Options {
	cmd, err := SelfCommand(context.Background())
	require.NoError(t, err)
	return Options{Command: cmd, Settle: 200 * time.Millisecond}
}

// TestMeasureSimulatedLibrary measures the simulated libnvidia-ml of a fake
// driver root: the child read the profile's GPUs, and the library's pages
// and its own Go runtime's memory make the child with it larger.
func TestMeasureSimulatedLibrary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a fake driver root has device nodes: run as root")
	}
	root := fakedriver.ForTest(t, "../../internal/plugin/slice/testdata/static-mig.yaml", "mem-node")
	library, err := nvmllib.FindLibrary(root)
	require.NoError(t, err)
	f, err := Measure(context.Background(), library, selfOptions(t))
	require.NoError(t, err)
	t.Logf("%+v", f)
	require.Equal(t, library, f.Library)
	require.Equal(t, 2, f.GPUs)
	require.Positive(t, f.Mapped, "the library's pages are resident")
	require.Positive(t, f.Anon, "the simulated library's Go runtime has a heap")
	require.Greater(t, f.RSS, f.Mapped)
	require.InDelta(t, f.RSS, f.Anon+f.File, 0.5, "VmRSS is RssAnon + RssFile (+ RssShmem)")
}

// TestMeasureErrors: a library that does not load fails the measurement
// with what the child said; so does a context that ends while it settles.
func TestMeasureErrors(t *testing.T) {
	o := selfOptions(t)
	_, err := Measure(context.Background(), filepath.Join(t.TempDir(), "libnvidia-ml.so.1"), o)
	require.ErrorContains(t, err, "did not become ready")
	require.ErrorContains(t, err, "nvmlInit of ")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Measure(ctx, "unused", o)
	require.ErrorIs(t, err, context.Canceled)

	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, Main([]string{"-no-such-flag"}, &stdout, &stderr))
	require.Empty(t, stdout.String())
}
