package imexdaemon

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/shared/imex"
	"github.com/gpudra/gpudra/test/fakedriver"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// fakeTools builds the fake nvidia-imex and nvidia-imex-ctl into dir.
func fakeTools(t *testing.T, dir string) {
	t.Helper()
	for name, pkg := range map[string]string{imex.DaemonBinary: fakedriver.FakeIMEX, imex.CtlBinary: fakedriver.FakeIMEXCtl} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/gpudra/gpudra/test/cmd/"+pkg).CombinedOutput()
		require.NoError(t, err, string(out))
	}
}

func eventuallyCheck(t *testing.T, o Options, ready bool) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	var err error
	require.Eventually(t, func() bool {
		err = Check(ctx, o)
		if ready {
			return err == nil
		}
		return errors.Is(err, ErrNotReady) // an answer, not a daemon still starting
	}, 15*time.Second, 100*time.Millisecond, "last check: %v", err)
}

// TestRunWithFakeIMEX: two daemons of one domain, on 127.0.0.1 and
// 127.0.0.2 with one node list, are READY only once both run; a node added
// to the list that does not answer makes both not ready again after their
// restart.
func TestRunWithFakeIMEX(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no 127.0.0.2 on this host's loopback: %v", err)
	} else {
		_ = l.Close()
	}
	a, bin := testOptions(t)
	fakeTools(t, bin)
	require.NoError(t, os.WriteFile(a.NodesConfig, []byte("127.0.0.1\n127.0.0.2\n"), 0o644))
	a.ServerPort, a.CmdPort = freePort(t), freePort(t)
	b := a
	b.TmpDir, b.CmdPort = t.TempDir(), freePort(t)

	stopA, _ := runAsync(t, a)
	eventuallyCheck(t, a, false)
	stopB, _ := runAsync(t, b)
	eventuallyCheck(t, a, true)
	eventuallyCheck(t, b, true)

	require.NoError(t, os.WriteFile(a.NodesConfig+".new", []byte("127.0.0.1\n127.0.0.2\n127.0.0.3\n"), 0o644))
	require.NoError(t, os.Rename(a.NodesConfig+".new", a.NodesConfig))
	eventuallyCheck(t, a, false)
	eventuallyCheck(t, b, false)
	require.NoError(t, stopA())
	require.NoError(t, stopB())
}

// TestRunChrooted: with a driver root, nvidia-imex and nvidia-imex-ctl
// run chrooted into it (the fake root's copies, which need its C library)
// and the files lie in the root's tmp.
func TestRunChrooted(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("generates a fake driver root (as root)")
	}
	root := fakedriver.ForTest(t, "dgx-h100", "node-a")
	o, _ := testOptions(t)
	o.DriverRoot, o.TmpDir = root, ""
	o.ServerPort, o.CmdPort = freePort(t), freePort(t)
	require.NoError(t, os.WriteFile(o.NodesConfig, []byte("127.0.0.1\n"), 0o644))
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	eventuallyCheck(t, o, true)
	require.FileExists(t, filepath.Join(root, imex.WorkDirBase, o.DomainUID, imex.ConfigFile))
	require.FileExists(t, filepath.Join(root, imex.WorkDirBase, o.DomainUID, imex.NodesFile))
	cancel()
	require.NoError(t, <-done)
}
