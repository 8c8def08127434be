package sharing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// Container paths of the MPS directories: the pipe directory is where CUDA
// looks by default, so workloads need no configuration.
const (
	ContainerPipeDir = "/tmp/nvidia-mps"
	ContainerLogDir  = "/var/log/nvidia-mps"

	pipeSubdir = "pipe"
	logSubdir  = "log"
	shmSubdir  = "shm"
	pidFile    = "daemon.pid"
)

// MPSOptions configure MPSControl.
type MPSOptions struct {
	// ControlPath is nvidia-cuda-mps-control (real) or the fake one.
	ControlPath string
	// Root holds one directory per claim (<Root>/<claimUID>/{pipe,log,shm}
	// for its daemon of group 0, <Root>/<claimUID>/group-<n>/… for the
	// others); it
	// must be a host path, because it is mounted into containers, and every
	// plugin instance of the node (two during a rolling update) must use the
	// same one.
	Root string
	// StartTimeout bounds the wait for a new daemon to answer (default 10s).
	StartTimeout time.Duration
	// StopTimeout bounds the wait for a daemon to quit before it is killed
	// (default 10s), and a command sent to it.
	StopTimeout time.Duration
	// ProbeTimeout bounds one liveness query of a daemon (default 5s).
	ProbeTimeout time.Duration
	// Env is added to the environment of the control tool and daemon.
	Env []string
	// ShmTmpfs mounts a tmpfs on each claim's shm directory, the /dev/shm
	// of its daemon and clients; where mounting is not permitted (an
	// unprivileged plugin) the directory stays a plain one.
	ShmTmpfs bool
	// ShmSize is the size of that tmpfs (mount option size=, "" for the
	// kernel's default of half the RAM).
	ShmSize string
}

// MPSControl starts, adopts and stops the MPS control daemons of claims,
// one per configuration group of a claim (PlanMPS).
//
// A daemon is identified by its control pipe answering a harmless query
// (probe), not by a PID. The plugin may run in a PID namespace of its own
// (the chart's DaemonSet has no hostPID), and during a rolling update two
// plugin pods run side by side, each in its own namespace: a PID that one
// of them recorded means nothing, or another process, to the other. Both
// see the same pipe directory (a host path), and a connection to it reaches
// the daemon whoever started it; a daemon that died leaves its socket
// behind, so the control entry existing proves nothing. The PID in the pid
// file, with the PID namespace it belongs to, is used only where it is
// visible: to kill a daemon of ours that ignores "quit" or hangs.
//
// The directory of a daemon that answers is never removed: a daemon whose
// directory is gone cannot be reached or stopped any more. Callers hold the
// claim's lock (shared by all plugin instances of the node) around every
// call for that claim.
type MPSControl struct {
	opts MPSOptions
	// pidNS identifies this process's PID namespace ("pid:[4026531836]").
	pidNS string
	mu    sync.Mutex
	// exited is closed when a daemon started by this process has been reaped.
	exited map[int]chan struct{}
	// runner starts and stops the daemons (processRunner unless UseRunner).
	runner DaemonRunner
	// shmWarned is set once a tmpfs could not be mounted.
	shmWarned sync.Once
}

// NewMPSControl checks the options and creates Root.
func NewMPSControl(opts MPSOptions) (*MPSControl, error) {
	if opts.Root == "" {
		return nil, errors.New("MPS: no state directory configured")
	}
	if err := os.MkdirAll(opts.Root, 0o755); err != nil {
		return nil, fmt.Errorf("create MPS state directory: %w", err)
	}
	for _, d := range []*time.Duration{&opts.StartTimeout, &opts.StopTimeout} {
		if *d <= 0 {
			*d = 10 * time.Second
		}
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	ns, _ := os.Readlink("/proc/self/ns/pid")
	c := &MPSControl{opts: opts, pidNS: ns, exited: map[int]chan struct{}{}}
	c.runner = processRunner{c}
	return c, nil
}

// ClaimDir is the directory of a claim's daemons: that of its group 0,
// which holds the directories of its further groups (DaemonDir).
func (c *MPSControl) ClaimDir(claimUID string) string { return filepath.Join(c.opts.Root, claimUID) }

// groupDirPrefix + the group number names the directory of a further
// group's daemon inside the claim's directory.
const groupDirPrefix = "group-"

// DaemonDir is the directory of the claim's daemon of group: the claim's
// directory for group 0 (where a claim's one daemon lived before claims
// had a daemon per configuration group), <claim dir>/group-<n> otherwise.
func (c *MPSControl) DaemonDir(claimUID string, group int) string {
	if group == 0 {
		return c.ClaimDir(claimUID)
	}
	return filepath.Join(c.ClaimDir(claimUID), groupDirPrefix+strconv.Itoa(group))
}

// groupsInDir lists the further groups (1, 2, …) whose directories exist
// in a claim's directory.
func groupsInDir(claimDir string) []int {
	entries, _ := os.ReadDir(claimDir)
	var out []int
	for _, e := range entries {
		num, ok := strings.CutPrefix(e.Name(), groupDirPrefix)
		if n, err := strconv.Atoi(num); ok && e.IsDir() && err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// Start starts the daemon described by d (Devices and limits set; Dir and,
// where the runner knows it, PID are filled in) and applies its settings.
// A daemon that still answers in its directory (DaemonDir; an interrupted
// earlier attempt, whichever plugin instance made it) is stopped first; if
// it does not stop, Start fails and leaves it and its directory alone. On
// error nothing Start started is left running.
func (c *MPSControl) Start(ctx context.Context, claimUID string, d *MPSDaemon) error {
	if err := model.ValidateUID(claimUID); err != nil {
		return err
	}
	if c.opts.ControlPath == "" {
		return fmt.Errorf("start MPS control daemon: %w: no nvidia-cuda-mps-control configured (--mps-control-path)", ErrNoTool)
	}
	d.Dir = c.DaemonDir(claimUID, d.Group)
	existed, err := c.readyDir(ctx, claimUID, d.Group, d.Dir)
	if err != nil {
		return err
	}
	// What a failed start leaves: a directory that existed before stays
	// (the claim's containers may bind-mount it), a new one goes.
	cleanup := func() {
		if !existed {
			c.releaseShm(ctx, d.Dir)
			_ = os.RemoveAll(d.Dir)
		}
	}
	exited, err := c.runner.Start(ctx, claimUID, d)
	if err != nil {
		c.runner.Abort(ctx, claimUID, d)
		cleanup()
		return err
	}
	fail := func(err error) error {
		c.runner.Abort(ctx, claimUID, d)
		c.clearPipeDir(ctx, d.Dir)
		cleanup()
		return err
	}
	if err := c.waitAnswering(ctx, claimUID, d, exited); err != nil {
		return fail(err)
	}
	if cmds := Commands(d); len(cmds) > 0 {
		if _, err := c.run(ctx, d.Dir, c.opts.StopTimeout, cmds...); err != nil {
			return fail(err)
		}
	}
	if d.PID == 0 {
		d.PID = controlPID(d.Dir)
	}
	klog.FromContext(ctx).V(3).Info("Started MPS control daemon", "claimUID", claimUID, "pid", d.PID, "devices", d.Devices)
	return nil
}

// readyDir makes a claim's directory ready for a new daemon and reports
// whether it existed: a daemon that answers there is stopped through its
// pipe, what a dead one left in the pipe directory is removed. The
// directories themselves are kept, so that the bind mounts of the claim's
// containers keep pointing at the directory the new daemon listens in.
func (c *MPSControl) readyDir(ctx context.Context, claimUID string, group int, dir string) (bool, error) {
	_, err := os.Lstat(dir)
	existed := err == nil
	if existed {
		if err := c.runner.Stop(ctx, claimUID, group, dir); err != nil {
			return true, err
		}
		c.clearPipeDir(ctx, dir)
	}
	for _, sub := range []string{pipeSubdir, logSubdir, shmSubdir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return existed, fmt.Errorf("create MPS directory: %w", err)
		}
	}
	c.mountShm(ctx, filepath.Join(dir, shmSubdir))
	return existed, nil
}

// clearPipeDir removes what a daemon that no longer answers left in its
// pipe directory (its socket, its pid files).
func (c *MPSControl) clearPipeDir(ctx context.Context, dir string) {
	pipe := filepath.Join(dir, pipeSubdir)
	entries, _ := os.ReadDir(pipe)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(pipe, e.Name())); err != nil {
			klog.FromContext(ctx).Error(err, "Leftover of a dead MPS control daemon not removed", "path", filepath.Join(pipe, e.Name()))
		}
	}
	_ = os.Remove(filepath.Join(dir, pidFile))
}

func (c *MPSControl) env(dir string) []string {
	return append(append(os.Environ(), c.opts.Env...),
		PipeDirEnv+"="+filepath.Join(dir, pipeSubdir),
		"CUDA_MPS_LOG_DIRECTORY="+filepath.Join(dir, logSubdir))
}

// EnsureResult says what Ensure found.
type EnsureResult struct {
	// Replaced is set when the claim's daemon did not answer and a new one
	// was started with the same directories and settings. CUDA processes
	// that were connected to the old daemon lost their MPS server and must
	// be restarted; new processes in the claim's containers reach the new
	// daemon (the pipe directory they mount is the same).
	Replaced bool
	// OldPID is the recorded PID of the daemon that was replaced (in the
	// PID namespace of the plugin instance that started it).
	OldPID int
	// Reason is why the old daemon counted as gone.
	Reason string
}

// Ensure makes sure the daemon d of a prepared claim runs: a daemon that
// answers in its directory is adopted, whichever plugin instance
// started it; otherwise the dead daemon's leftovers are removed and a new
// one is started with the same settings (d.PID changes), and the result
// says so. If that start fails, the result still says why the old daemon
// counted as gone, and the error is Start's.
func (c *MPSControl) Ensure(ctx context.Context, claimUID string, d *MPSDaemon) (EnsureResult, error) {
	if err := model.ValidateUID(claimUID); err != nil {
		return EnsureResult{}, err
	}
	logger := klog.FromContext(ctx).WithValues("claimUID", claimUID, "group", d.Group)
	dir := c.DaemonDir(claimUID, d.Group)
	err := c.probe(ctx, dir)
	if err != nil {
		// One more try, so that a daemon busy for a moment is not replaced.
		select {
		case <-ctx.Done():
			return EnsureResult{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		err = c.probe(ctx, dir)
	}
	if err == nil {
		logger.V(3).Info("Adopted running MPS control daemon", "recordedPID", d.PID)
		return EnsureResult{}, nil
	}
	res := EnsureResult{Replaced: true, OldPID: d.PID, Reason: err.Error()}
	logger.Info("MPS control daemon of a prepared claim does not answer; starting a new one", "oldPID", d.PID, "reason", res.Reason)
	if err := c.Start(ctx, claimUID, d); err != nil {
		return res, err // the caller has the reason; Start's error says what failed
	}
	return res, nil
}

// StopClaim stops every daemon of a claim, if any, through its pipe, and
// removes their directories: the daemons of further groups first (their
// directories are inside the claim's), then group 0's. It finds the
// daemons by their directories and the runner's list, not by the record,
// so it also stops one that another plugin instance started, whose record
// never got it, or whose directory is already gone (a crash between the
// removal of a directory and the end of its Pod). Stopping a claim without
// a daemon succeeds. A daemon that still answers after "quit" (and cannot
// be killed because its process is not visible here) fails the call and
// keeps its directory.
func (c *MPSControl) StopClaim(ctx context.Context, claimUID string) error {
	if err := model.ValidateUID(claimUID); err != nil {
		return err
	}
	dir := c.ClaimDir(claimUID)
	groups := groupsInDir(dir)
	launched, err := c.runner.Daemons(ctx)
	if err != nil {
		return fmt.Errorf("stop the MPS control daemons of claim %s: %w", claimUID, err)
	}
	for _, l := range launched {
		if l.ClaimUID == claimUID && l.Group > 0 && !slices.Contains(groups, l.Group) {
			groups = append(groups, l.Group)
		}
	}
	slices.Sort(groups)
	for _, g := range append(groups, 0) {
		if err := c.stopDaemonDir(ctx, claimUID, g, c.DaemonDir(claimUID, g)); err != nil {
			return err
		}
	}
	return nil
}

// stopDaemonDir stops one daemon of a claim and removes its directory.
func (c *MPSControl) stopDaemonDir(ctx context.Context, claimUID string, group int, dir string) error {
	if err := c.runner.Stop(ctx, claimUID, group, dir); err != nil {
		return fmt.Errorf("stop the MPS control daemon of claim %s (group %d): %w", claimUID, group, err)
	}
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c.releaseShm(ctx, dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove MPS directory %s of claim %s: %w", dir, claimUID, err)
	}
	return nil
}

// Orphans lists the claim UIDs that have a daemon directory, or a daemon
// the runner knows (a Pod), but that isKnown does not know. StopClaim stops
// their daemons (a daemon of an unknown claim that answers is found here
// too: its directory is the only way to reach it).
func (c *MPSControl) Orphans(ctx context.Context, isKnown func(claimUID string) bool) ([]string, error) {
	entries, err := os.ReadDir(c.opts.Root)
	if err != nil {
		return nil, fmt.Errorf("list MPS state directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && model.ValidateUID(e.Name()) == nil && !isKnown(e.Name()) {
			out = append(out, e.Name())
		}
	}
	launched, err := c.runner.Daemons(ctx)
	if err != nil {
		return out, fmt.Errorf("list MPS control daemons: %w", err)
	}
	for _, l := range launched {
		if uid := l.ClaimUID; model.ValidateUID(uid) == nil && !isKnown(uid) && !slices.Contains(out, uid) {
			out = append(out, uid)
		}
	}
	return out, nil
}
