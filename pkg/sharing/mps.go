package sharing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/checkpoint"
	"github.com/gpudra/gpudra/pkg/model"
)

// Container paths of the MPS directories: the pipe directory is where CUDA
// looks by default, so workloads need no configuration.
const (
	ContainerPipeDir = "/tmp/nvidia-mps"
	ContainerLogDir  = "/var/log/nvidia-mps"

	pipeSubdir = "pipe"
	logSubdir  = "log"
	pidFile    = "daemon.pid"
	// controlEntry appears in the pipe directory once the daemon listens.
	controlEntry = "control"
)

// MPSOptions configure MPSControl.
type MPSOptions struct {
	// ControlPath is nvidia-cuda-mps-control (real) or the fake one.
	ControlPath string
	// Root holds one directory per claim (<Root>/<claimUID>/{pipe,log}); it
	// must be a host path, because it is mounted into containers.
	Root string
	// StartTimeout bounds the wait for a new daemon to listen (default 10s).
	StartTimeout time.Duration
	// StopTimeout bounds the wait for a daemon to quit before it is killed
	// (default 10s).
	StopTimeout time.Duration
	// Env is added to the environment of the control tool and daemon.
	Env []string
}

// MPSControl starts, adopts and stops one MPS control daemon per claim. The
// daemons run in their own session, so they outlive a crash of the plugin
// process; their PID and directories are in the claim's checkpoint record
// and in a pid file, so a restarted plugin adopts them (or starts them
// again) and never leaks one.
type MPSControl struct {
	opts MPSOptions
	mu   sync.Mutex
	// exited is closed when a daemon started by this process has been reaped.
	exited map[int]chan struct{}
}

// NewMPSControl checks the options and creates Root.
func NewMPSControl(opts MPSOptions) (*MPSControl, error) {
	if opts.Root == "" {
		return nil, errors.New("MPS: no state directory configured")
	}
	if err := os.MkdirAll(opts.Root, 0o755); err != nil {
		return nil, fmt.Errorf("create MPS state directory: %w", err)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 10 * time.Second
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 10 * time.Second
	}
	return &MPSControl{opts: opts, exited: map[int]chan struct{}{}}, nil
}

// ClaimDir is the directory of a claim's daemon.
func (c *MPSControl) ClaimDir(claimUID string) string { return filepath.Join(c.opts.Root, claimUID) }

// Start starts the daemon described by d (Devices and limits set; Dir and PID
// are filled in) and applies its settings. On error nothing is left running.
func (c *MPSControl) Start(ctx context.Context, claimUID string, d *checkpoint.MPSDaemon) error {
	if err := model.ValidateUID(claimUID); err != nil {
		return err
	}
	if c.opts.ControlPath == "" {
		return fmt.Errorf("start MPS control daemon: %w: no nvidia-cuda-mps-control configured (--mps-control-path)", ErrNoTool)
	}
	d.Dir = c.ClaimDir(claimUID)
	// A leftover of an earlier attempt (its daemon is stopped first).
	if err := c.StopClaim(ctx, claimUID); err != nil {
		return err
	}
	for _, sub := range []string{pipeSubdir, logSubdir} {
		if err := os.MkdirAll(filepath.Join(d.Dir, sub), 0o755); err != nil {
			return fmt.Errorf("create MPS directory: %w", err)
		}
	}
	out, err := os.OpenFile(filepath.Join(d.Dir, logSubdir, "daemon.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("create MPS daemon output file: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(c.opts.ControlPath, "-f")
	cmd.Env = append(c.env(d.Dir), "CUDA_VISIBLE_DEVICES="+strings.Join(d.Devices, ","))
	cmd.Stdout, cmd.Stderr = out, out
	// Own session: a signal to the plugin's process group does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(d.Dir)
		return fmt.Errorf("start MPS control daemon %s: %w; set --mps-control-path to the driver's nvidia-cuda-mps-control", c.opts.ControlPath, err)
	}
	d.PID = cmd.Process.Pid
	done := make(chan struct{})
	c.mu.Lock()
	c.exited[d.PID] = done
	c.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	fail := func(err error) error {
		_ = c.StopClaim(ctx, claimUID)
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Dir, pidFile), []byte(strconv.Itoa(d.PID)), 0o644); err != nil {
		return fail(fmt.Errorf("write MPS daemon pid file: %w", err))
	}
	if err := c.waitListening(ctx, d, done); err != nil {
		return fail(err)
	}
	if err := c.applySettings(ctx, d); err != nil {
		return fail(err)
	}
	klog.FromContext(ctx).V(3).Info("Started MPS control daemon", "claimUID", claimUID, "pid", d.PID, "devices", d.Devices)
	return nil
}

func (c *MPSControl) env(dir string) []string {
	return append(append(os.Environ(), c.opts.Env...),
		"CUDA_MPS_PIPE_DIRECTORY="+filepath.Join(dir, pipeSubdir),
		"CUDA_MPS_LOG_DIRECTORY="+filepath.Join(dir, logSubdir))
}

func (c *MPSControl) waitListening(ctx context.Context, d *checkpoint.MPSDaemon, done <-chan struct{}) error {
	ctl := filepath.Join(d.Dir, pipeSubdir, controlEntry)
	deadline := time.NewTimer(c.opts.StartTimeout)
	defer deadline.Stop()
	for {
		if _, err := os.Lstat(ctl); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("MPS control daemon exited at start: %s", c.tail(d.Dir))
		case <-deadline.C:
			return fmt.Errorf("MPS control daemon did not create %s within %s: %s", ctl, c.opts.StartTimeout, c.tail(d.Dir))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// tail returns the end of the daemon's output, for error messages.
func (c *MPSControl) tail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, logSubdir, "daemon.out"))
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	if s == "" {
		return "no output"
	}
	return s
}

// Commands returns the control commands that apply d's settings.
func Commands(d *checkpoint.MPSDaemon) []string {
	var cmds []string
	if d.ActiveThreadPercentage > 0 {
		cmds = append(cmds, fmt.Sprintf("set_default_active_thread_percentage %d", d.ActiveThreadPercentage))
	}
	for i, limit := range d.PinnedMemoryLimits {
		if limit > 0 {
			cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %d %s", i, MiB(limit)))
		}
	}
	return cmds
}

// MiB renders a limit in whole MiB the way MPS takes it ("20480M"),
// rounding down.
func MiB(bytes int64) string { return strconv.FormatInt(bytes>>20, 10) + "M" }

// applySettings sends the settings to a daemon that has just started. The
// control entry can appear a moment before the daemon accepts connections,
// so a failed send is retried briefly.
func (c *MPSControl) applySettings(ctx context.Context, d *checkpoint.MPSDaemon) error {
	cmds := Commands(d)
	if len(cmds) == 0 {
		return nil
	}
	var err error
	for delay := 5 * time.Millisecond; delay < time.Second; delay *= 2 {
		if err = c.send(ctx, d.Dir, cmds); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
	return err
}

// send runs the control tool in client mode with the commands on stdin.
func (c *MPSControl) send(ctx context.Context, dir string, cmds []string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StopTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.opts.ControlPath)
	cmd.Env = c.env(dir)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("send %q to the MPS control daemon in %s: %w: %s", cmds, dir, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Ensure makes sure the daemon of a restored claim runs: it adopts the
// recorded process if that is still our daemon, otherwise it starts a new
// one with the same settings (d.PID changes). It reports whether it started one.
func (c *MPSControl) Ensure(ctx context.Context, claimUID string, d *checkpoint.MPSDaemon) (bool, error) {
	if d.PID > 0 && c.isOurDaemon(d.PID, d.Dir) {
		klog.FromContext(ctx).V(3).Info("Adopted running MPS control daemon", "claimUID", claimUID, "pid", d.PID)
		return false, nil
	}
	klog.FromContext(ctx).Info("MPS control daemon of a prepared claim is gone; starting it again", "claimUID", claimUID, "oldPID", d.PID)
	return true, c.Start(ctx, claimUID, d)
}

// StopClaim stops the daemon of a claim, if any (found through its pid
// file, so it also works for a claim whose record never got the PID), and
// removes its directories. Stopping a claim without a daemon succeeds.
func (c *MPSControl) StopClaim(ctx context.Context, claimUID string) error {
	if err := model.ValidateUID(claimUID); err != nil {
		return err
	}
	dir := c.ClaimDir(claimUID)
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read MPS daemon pid file: %w", err)
	default:
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid > 0 && c.isOurDaemon(pid, dir) {
			c.stop(ctx, pid, dir)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove MPS directory of claim %s: %w", claimUID, err)
	}
	return nil
}

// stop asks the daemon to quit and kills it after StopTimeout.
func (c *MPSControl) stop(ctx context.Context, pid int, dir string) {
	logger := klog.FromContext(ctx)
	if err := c.send(ctx, dir, []string{"quit"}); err != nil {
		logger.Info("MPS daemon did not take 'quit'; killing it", "pid", pid, "err", err)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if c.waitExit(pid, c.opts.StopTimeout) {
		return
	}
	logger.Info("MPS daemon did not quit in time; killing it", "pid", pid, "timeout", c.opts.StopTimeout)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	c.waitExit(pid, c.opts.StopTimeout)
}

func (c *MPSControl) waitExit(pid int, timeout time.Duration) bool {
	c.mu.Lock()
	done, child := c.exited[pid]
	c.mu.Unlock()
	if child {
		select {
		case <-done:
			c.mu.Lock()
			delete(c.exited, pid)
			c.mu.Unlock()
			return true
		case <-time.After(timeout):
			return false
		}
	}
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !alive(pid) {
			return true
		}
	}
	return false
}

// Orphans lists claim UIDs that have a daemon directory.
func (c *MPSControl) Orphans(isKnown func(claimUID string) bool) ([]string, error) {
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
	return out, nil
}

// isOurDaemon reports whether pid is alive and is the daemon of dir: its
// environment names dir's pipe directory. A recycled PID never matches.
func (c *MPSControl) isOurDaemon(pid int, dir string) bool {
	if !alive(pid) {
		return false
	}
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	want := "CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(dir, pipeSubdir)
	for _, kv := range bytes.Split(env, []byte{0}) {
		if string(kv) == want {
			return true
		}
	}
	return false
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
