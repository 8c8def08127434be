package sharing

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
)

func fakeControl() string { return filepath.Join(binDir, "gpudra-fake-mps-control") }

// What test/fakegpu's daemon records and reads (that package imports this
// one, so its names are repeated here).
const (
	fakeStateFile    = "fake-mps-state.json"
	fakeQuitDelayEnv = "GPUDRA_FAKE_MPS_QUIT_DELAY"
)

type fakeState struct {
	PID                    int               `json:"pid"`
	ActiveThreadPercentage int               `json:"activeThreadPercentage"`
	PinnedMemLimits        map[string]string `json:"pinnedMemLimits"`
}

func readFakeState(logDir string) (*fakeState, error) {
	b, err := os.ReadFile(filepath.Join(logDir, fakeStateFile))
	if err != nil {
		return nil, err
	}
	var s fakeState
	return &s, json.Unmarshal(b, &s)
}

// newMPS returns an MPSControl over root ("": a new one). Roots are kept
// short: the fake daemon's socket path then fits a unix address directly.
func newMPS(t *testing.T, control, root string) *MPSControl {
	t.Helper()
	if root == "" {
		var err error
		root, err = os.MkdirTemp("", "mps")
		require.NoError(t, err)
		t.Cleanup(func() { stopAll(t, root); _ = os.RemoveAll(root) })
	}
	c, err := NewMPSControl(MPSOptions{ControlPath: control, Root: root, Env: toolEnv, StartTimeout: 5 * time.Second,
		StopTimeout: 2 * time.Second, ProbeTimeout: 2 * time.Second})
	require.NoError(t, err)
	return c
}

// stopAll kills the fake daemons still serving a pipe directory under root
// (the fake, like the real daemon, outlives the removal of its directory).
func stopAll(t *testing.T, root string) {
	for _, pid := range daemonsUnder(t, root) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// daemonsUnder lists, as this process sees them, the PIDs of control
// daemons whose pipe directory is under root, whatever PID namespace they
// run in (a parent namespace sees its children's processes).
func daemonsUnder(t *testing.T, root string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !IsControlDaemonCmdline(cmdline) {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if dir, ok := PipeDirectoryOf(env); ok && strings.HasPrefix(dir, root+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestMPSControlStartStopAdopt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newMPS(t, fakeControl(), "")
	d := &MPSDaemon{Devices: []string{gpuA}, ActiveThreadPercentage: 10, PinnedMemoryLimits: []int64{1 << 30}}
	require.NoError(t, c.Start(ctx, uid, d))
	require.True(t, alive(d.PID))
	require.Equal(t, c.ClaimDir(uid), d.Dir)
	st, err := readFakeState(filepath.Join(d.Dir, logSubdir))
	require.NoError(t, err)
	require.Equal(t, 10, st.ActiveThreadPercentage)
	require.Equal(t, map[string]string{"0": "1024M"}, st.PinnedMemLimits)

	// A second control (a restarted plugin) adopts it.
	c2 := newMPS(t, fakeControl(), c.opts.Root)
	res, err := c2.Ensure(ctx, uid, d)
	require.NoError(t, err)
	require.False(t, res.Replaced)

	// A recorded daemon that does not answer is replaced, even if its
	// recorded PID is alive (a recycled PID is not taken for it).
	const uid2 = "12345678-0000-0000-0000-000000000002"
	other := *d
	other.PID = os.Getpid()
	res, err = c2.Ensure(ctx, uid2, &other)
	require.NoError(t, err)
	require.Equal(t, EnsureResult{Replaced: true, OldPID: os.Getpid(), Reason: res.Reason}, res)
	require.ErrorIs(t, c2.probe(ctx, t.TempDir()), errNoAnswer)
	require.NoError(t, c2.probe(ctx, other.Dir))
	require.NotEqual(t, os.Getpid(), other.PID)

	orphans, err := c2.Orphans(ctx, func(u string) bool { return u == uid })
	require.NoError(t, err)
	require.Equal(t, []string{uid2}, orphans)

	require.NoError(t, c2.StopClaim(ctx, uid))
	require.NoError(t, c2.StopClaim(ctx, orphans[0]))
	require.False(t, alive(d.PID), "stopped through its pipe")
	require.False(t, alive(other.PID))
	require.NoDirExists(t, d.Dir)
	require.NoError(t, c2.StopClaim(ctx, uid), "stopping twice succeeds")
}

func TestMPSControlStartFailures(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	err := newMPS(t, "/nonexistent/nvidia-cuda-mps-control", "").Start(ctx, uid, &MPSDaemon{Devices: []string{gpuA}})
	require.ErrorContains(t, err, "set --mps-control-path")
	require.ErrorIs(t, newMPS(t, "", "").Start(ctx, uid, &MPSDaemon{}), ErrNoTool)

	c := newMPS(t, "/bin/false", "")
	err = c.Start(ctx, uid, &MPSDaemon{Devices: []string{gpuA}})
	require.ErrorContains(t, err, "MPS control daemon exited at start")
	require.NoDirExists(t, c.ClaimDir(uid), "a failed start leaves nothing behind")

	// A control tool that exits 0 without answering is not taken for a daemon.
	script := filepath.Join(t.TempDir(), "silent")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = -f ] && exec sleep 600\nexit 0\n"), 0o755))
	c = newMPS(t, script, "")
	c.opts.StartTimeout = 300 * time.Millisecond
	err = c.Start(ctx, uid, &MPSDaemon{Devices: []string{gpuA}})
	require.ErrorContains(t, err, "did not answer within 300ms")
	require.ErrorContains(t, err, `answered "", not a number`)
	require.NoDirExists(t, c.ClaimDir(uid))
}

// TestMPSControlStopsStubbornAndHungDaemons: daemons of this process that
// ignore "quit" or stop answering are killed (their PID is visible here).
func TestMPSControlStopsStubbornAndHungDaemons(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	t.Setenv(fakeQuitDelayEnv, "1h") // keeps answering after quit
	c := newMPS(t, fakeControl(), "")
	c.opts.StopTimeout = 300 * time.Millisecond
	d := &MPSDaemon{Devices: []string{gpuA}}
	require.NoError(t, c.Start(ctx, uid, d))
	require.NoError(t, c.StopClaim(ctx, uid))
	require.False(t, alive(d.PID))
	require.NoDirExists(t, d.Dir)

	// A daemon that hangs (stopped) is replaced, the hung process killed,
	// in the same directory.
	c.opts.ProbeTimeout = 300 * time.Millisecond
	require.NoError(t, c.Start(ctx, uid, d))
	mount := openPipeDir(t, d.Dir)
	hung := d.PID
	require.NoError(t, syscall.Kill(hung, syscall.SIGSTOP))
	res, err := c.Ensure(ctx, uid, d)
	require.NoError(t, err)
	require.True(t, res.Replaced)
	require.Equal(t, hung, res.OldPID)
	require.Contains(t, res.Reason, "no answer within 300ms")
	require.False(t, alive(hung))
	require.NotEqual(t, hung, d.PID)
	requireSameDir(t, mount)
	// The replacement answers. Asked with the default timeout: one start of
	// the control tool (a process with the simulated library preloaded) can
	// take longer than 300 ms on a loaded machine, which failed this check
	// now and then although the daemon answered.
	c.opts.ProbeTimeout = 5 * time.Second
	require.NoError(t, c.probe(ctx, d.Dir))
}

// TestMPSControlTwoGroups: a claim's daemons of two configuration groups
// run side by side, each in its own directory with its own settings; a
// restarted plugin adopts both, one that died is replaced alone, and
// StopClaim stops both (also when a crash left group 1 without group 0).
func TestMPSControlTwoGroups(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newMPS(t, fakeControl(), "")
	d0 := &MPSDaemon{Devices: []string{gpuA}, ActiveThreadPercentage: 20}
	d1 := &MPSDaemon{Group: 1, Devices: []string{gpuB}, ActiveThreadPercentage: 50}
	require.NoError(t, c.Start(ctx, uid, d0))
	require.NoError(t, c.Start(ctx, uid, d1))
	require.Equal(t, c.ClaimDir(uid), d0.Dir, "group 0 keeps the directory of a claim's one daemon")
	require.Equal(t, filepath.Join(c.ClaimDir(uid), "group-1"), d1.Dir)
	require.NotEqual(t, d0.PID, d1.PID)
	for _, tc := range []struct {
		d   *MPSDaemon
		pct int
	}{{d0, 20}, {d1, 50}} {
		st, err := readFakeState(filepath.Join(tc.d.Dir, logSubdir))
		require.NoError(t, err)
		require.Equal(t, tc.pct, st.ActiveThreadPercentage)
	}

	c2 := newMPS(t, fakeControl(), c.opts.Root)
	for _, d := range []*MPSDaemon{d0, d1} {
		res, err := c2.Ensure(ctx, uid, d)
		require.NoError(t, err)
		require.False(t, res.Replaced, "group %d adopted", d.Group)
	}
	require.NoError(t, c.stopDaemon(ctx, d1.Dir))
	old1 := d1.PID
	res, err := c2.Ensure(ctx, uid, d1)
	require.NoError(t, err)
	require.True(t, res.Replaced)
	require.NoError(t, c2.probe(ctx, d1.Dir))
	require.NotEqual(t, old1, d1.PID)
	require.True(t, alive(d0.PID), "group 0 is left alone")

	require.NoError(t, c2.StopClaim(ctx, uid))
	require.False(t, alive(d0.PID))
	require.False(t, alive(d1.PID))
	require.NoDirExists(t, c.ClaimDir(uid))

	// Only group 1 left (a crash during a prepare): found by its directory.
	d1 = &MPSDaemon{Group: 1, Devices: []string{gpuB}}
	require.NoError(t, c.Start(ctx, uid, d1))
	orphans, err := c.Orphans(ctx, func(string) bool { return false })
	require.NoError(t, err)
	require.Equal(t, []string{uid}, orphans)
	require.NoError(t, c.StopClaim(ctx, uid))
	require.False(t, alive(d1.PID))
	require.NoDirExists(t, c.ClaimDir(uid))
}
