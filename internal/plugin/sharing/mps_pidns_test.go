package sharing

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
)

// A plugin pod without hostPID runs in a PID namespace of its own, and
// during a rolling update two of them share the node's MPS directories.
// These tests run one plugin instance ("pod A") as a helper process under
// `unshare --pid --fork --mount-proc` and use MPSControl from the test
// process as the other ("pod B"): the PIDs pod A records mean nothing here.
// When pod A exits, the kernel ends every process of its namespace, its MPS
// daemons too, as a container runtime does when a plugin container stops.

const (
	helperEnv        = "GPUDRA_MPS_TEST_HELPER"
	helperRootEnv    = "GPUDRA_MPS_TEST_ROOT"
	helperControlEnv = "GPUDRA_MPS_TEST_CONTROL"
	helperPreloadEnv = "GPUDRA_MPS_TEST_PRELOAD"
)

// helperDaemon is what pod A starts for a claim.
func helperDaemon() *MPSDaemon {
	return &MPSDaemon{Devices: []string{gpuA}, ActiveThreadPercentage: 25, PinnedMemoryLimits: []int64{2 << 30}}
}

// runPluginHelper is pod A: it reads "start <uid>" lines, starts the
// claim's daemon and answers "ok <pid>" (or "err <message>"); it exits at
// the end of its input.
func runPluginHelper() int {
	// The parent's toolEnv (TestMain built the library once).
	env := []string{"LD_PRELOAD=" + os.Getenv(helperPreloadEnv)}
	c, err := NewMPSControl(MPSOptions{ControlPath: os.Getenv(helperControlEnv), Root: os.Getenv(helperRootEnv), Env: env})
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		uid, ok := strings.CutPrefix(sc.Text(), "start ")
		if !ok {
			fmt.Println("err unknown command", sc.Text())
			continue
		}
		d := helperDaemon()
		if err := c.Start(context.Background(), uid, d); err != nil {
			fmt.Println("err", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Println("ok", d.PID)
	}
	return 0
}

// podA is a plugin instance in a PID namespace of its own.
type podA struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startPodA(t *testing.T, root string) *podA {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace (unshare --pid)")
	}
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare --pid --fork --mount-proc does not work here: %v: %s", err, out)
	}
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperRootEnv+"="+root, helperControlEnv+"="+fakeControl(),
		helperPreloadEnv+"="+strings.TrimPrefix(toolEnv[0], "LD_PRELOAD="))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &podA{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(p.exit)
	return p
}

// start has pod A start a claim's daemon and returns it as pod A records it.
func (p *podA) start(uid string) *MPSDaemon {
	p.t.Helper()
	_, err := fmt.Fprintln(p.in, "start", uid)
	require.NoError(p.t, err)
	require.True(p.t, p.out.Scan(), "pod A ended")
	pid, ok := strings.CutPrefix(p.out.Text(), "ok ")
	require.True(p.t, ok, p.out.Text())
	d := helperDaemon()
	d.PID, err = strconv.Atoi(pid)
	require.NoError(p.t, err)
	return d
}

// exit ends pod A and with it every daemon it started.
func (p *podA) exit() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.in.Close()
	_ = p.cmd.Wait()
}

const (
	claimX = "aaaaaaaa-0000-0000-0000-00000000000a"
	claimY = "bbbbbbbb-0000-0000-0000-00000000000b"
)

func TestMPSAcrossPIDNamespaces(t *testing.T) {
	tests := []struct {
		name string
		// quitDelay keeps pod A's daemons answering after "quit" (their
		// servers waiting for clients).
		quitDelay string
		run       func(t *testing.T, ctx context.Context, a *podA, b *MPSControl, x *MPSDaemon)
	}{{
		name: "a restarted plugin adopts the daemon it cannot see",
		run: func(t *testing.T, ctx context.Context, a *podA, b *MPSControl, x *MPSDaemon) {
			res, err := b.Ensure(ctx, claimX, x)
			require.NoError(t, err)
			require.False(t, res.Replaced, "adopted: %s", res.Reason)
			requireServedBy(t, b, x, x.PID)
		},
	}, {
		name: "an overlapping instance prepares and unprepares another claim beside it",
		run: func(t *testing.T, ctx context.Context, a *podA, b *MPSControl, x *MPSDaemon) {
			y := helperDaemon()
			require.NoError(t, b.Start(ctx, claimY, y))
			orphans, err := b.Orphans(ctx, func(uid string) bool { return uid == claimX || uid == claimY })
			require.NoError(t, err)
			require.Empty(t, orphans)
			require.NoError(t, b.StopClaim(ctx, claimY))
			requireServedBy(t, b, x, x.PID)
		},
	}, {
		name: "the daemon of an unknown claim is stopped through its pipe",
		run: func(t *testing.T, ctx context.Context, a *podA, b *MPSControl, x *MPSDaemon) {
			orphans, err := b.Orphans(ctx, func(string) bool { return false })
			require.NoError(t, err)
			require.Equal(t, []string{claimX}, orphans)
			require.NoError(t, b.StopClaim(ctx, claimX))
			require.NoDirExists(t, x.Dir)
			require.Eventually(t, func() bool { return len(daemonsUnder(t, b.opts.Root)) == 0 }, 5*time.Second, 10*time.Millisecond,
				"the daemon quit; none is left unreachable")
		},
	}, {
		name:      "a daemon that keeps answering after quit keeps its directory",
		quitDelay: "1h",
		run: func(t *testing.T, ctx context.Context, a *podA, b *MPSControl, x *MPSDaemon) {
			b.opts.StopTimeout = 300 * time.Millisecond
			err := b.StopClaim(ctx, claimX)
			require.ErrorContains(t, err, "still answers 300ms after 'quit'")
			require.ErrorContains(t, err, "its directory is kept")
			err = b.Start(ctx, claimX, helperDaemon())
			require.ErrorContains(t, err, "its directory is kept")
			requireServedBy(t, b, x, x.PID)
		},
	}, {
		name: "a daemon that died with its pod is replaced and reported",
		run: func(t *testing.T, ctx context.Context, a *podA, b *MPSControl, x *MPSDaemon) {
			mount := openPipeDir(t, x.Dir)
			a.exit()
			require.Eventually(t, func() bool { return len(daemonsUnder(t, b.opts.Root)) == 0 }, 5*time.Second, 10*time.Millisecond,
				"the kernel ended pod A's daemon")
			res, err := b.Ensure(ctx, claimX, x)
			require.NoError(t, err)
			require.True(t, res.Replaced)
			require.NotZero(t, res.OldPID)
			require.Contains(t, res.Reason, "does not answer")
			requireServedBy(t, b, x, x.PID)
			requireSameDir(t, mount)
			res, err = b.Ensure(ctx, claimX, x)
			require.NoError(t, err)
			require.False(t, res.Replaced, "replaced once")
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			t.Setenv(fakeQuitDelayEnv, tc.quitDelay)
			b := newMPS(t, fakeControl(), "")
			a := startPodA(t, b.opts.Root)
			x := a.start(claimX)
			x.Dir = b.ClaimDir(claimX)
			require.NoError(t, b.probe(ctx, x.Dir), "pod A's daemon answers pod B")
			pid, visible := b.visibleDaemon(x.Dir)
			require.False(t, visible, "pod A's daemon (pid %d there) is not visible to pod B", pid)
			tc.run(t, ctx, a, b, x)
		})
	}
}

// requireServedBy checks that the claim's directory exists and that its
// daemon answers with the claim's settings, and that it is the daemon with
// PID pid in the namespace that started it.
func requireServedBy(t *testing.T, c *MPSControl, d *MPSDaemon, pid int) {
	t.Helper()
	require.DirExists(t, d.Dir)
	require.NoError(t, c.probe(context.Background(), d.Dir))
	st, err := readFakeState(filepath.Join(d.Dir, logSubdir))
	require.NoError(t, err)
	require.Equal(t, pid, st.PID, "no second daemon was started")
	require.Equal(t, 25, st.ActiveThreadPercentage)
	require.Equal(t, map[string]string{"0": "2048M"}, st.PinnedMemLimits)
	require.Len(t, daemonsUnder(t, filepath.Dir(d.Dir)), 1, "one daemon for the claim")
}

// openPipeDir opens a claim's pipe directory as a container's bind mount
// holds it: through the directory itself, not its path.
func openPipeDir(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, pipeSubdir))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// requireSameDir checks that the daemon's control socket is in the
// directory mount holds: a container that mounted the pipe directory before
// the daemon was replaced reaches the new daemon.
func requireSameDir(t *testing.T, mount *os.File) {
	t.Helper()
	names, err := mount.Readdirnames(-1)
	require.NoError(t, err)
	require.Contains(t, names, "control", "the pipe directory that containers mount is kept")
	_, err = mount.Seek(0, 0)
	require.NoError(t, err)
}
