package sharing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// ProbeCommand is the query that tells whether a daemon answers. It only
// reads a setting, so it changes nothing, and a live daemon always answers
// it with a number ("100.0"): an exit status of 0 alone is not trusted.
// get_server_list would do as well, but its answer is empty when no client
// has connected yet, indistinguishable from a client that printed nothing.
const ProbeCommand = "get_default_active_thread_percentage"

// ProbeAnswered tells whether out, what the control tool printed for
// ProbeCommand, is a live daemon's answer (it holds a number).
func ProbeAnswered(out string) bool {
	for _, f := range strings.Fields(out) {
		if _, err := strconv.ParseFloat(f, 64); err == nil {
			return true
		}
	}
	return false
}

// errNoAnswer marks a daemon that does not answer its pipe.
var errNoAnswer = errors.New("the MPS control daemon does not answer")

// probe asks the daemon of dir for ProbeCommand through the control tool,
// as an administrator would, and returns nil if it answers. The daemon's
// pipe is a host path, so this works from any plugin instance whatever its
// PID namespace.
func (c *MPSControl) probe(ctx context.Context, dir string) error {
	out, err := c.run(ctx, dir, c.opts.ProbeTimeout, ProbeCommand)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	if ProbeAnswered(out) {
		return nil
	}
	return fmt.Errorf("%w: %q answered %q, not a number", errNoAnswer, ProbeCommand, strings.TrimSpace(out))
}

// run runs the control tool in client mode with the commands on stdin and
// returns what it printed.
func (c *MPSControl) run(ctx context.Context, dir string, timeout time.Duration, cmds ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.opts.ControlPath)
	cmd.Env = c.env(dir)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", timeout, err)
		}
		if said := strings.TrimSpace(out.String()); said != "" {
			err = fmt.Errorf("%w: %s", err, said)
		}
		return out.String(), fmt.Errorf("MPS control command %q in %s: %w", cmds, dir, err)
	}
	return out.String(), nil
}

// waitAnswering waits until a daemon just started answers its pipe (its
// control entry can exist a moment before it accepts connections).
func (c *MPSControl) waitAnswering(ctx context.Context, claimUID string, d *MPSDaemon, done <-chan struct{}) error {
	deadline := time.NewTimer(c.opts.StartTimeout)
	defer deadline.Stop()
	delay := 2 * time.Millisecond
	for {
		err := c.probe(ctx, d.Dir)
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("MPS control daemon exited at start: %s", c.runner.Describe(ctx, claimUID, d.Group, d.Dir))
		case <-deadline.C:
			return fmt.Errorf("MPS control daemon did not answer within %s (%w): %s", c.opts.StartTimeout, err, c.runner.Describe(ctx, claimUID, d.Group, d.Dir))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
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
func Commands(d *MPSDaemon) []string {
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

// stopDaemon stops the daemon of dir, if one answers, through its pipe
// ("quit") and waits until it no longer answers. A daemon that keeps
// answering is killed if its process is visible here (its PID in our PID
// namespace, its environment naming dir); if not, it is an error and the
// caller must keep dir. A daemon of ours that is alive but does not answer
// (hung) is killed; one we cannot see that does not answer is dead to its
// clients already.
func (c *MPSControl) stopDaemon(ctx context.Context, dir string) error {
	logger := klog.FromContext(ctx).WithValues("dir", dir)
	pid, visible := c.visibleDaemon(dir)
	// "quit" first: with a daemon there (the usual case, an unprepare) that
	// saves a query. If no daemon takes it, a query confirms that none
	// answers before anything is removed.
	if _, err := c.run(ctx, dir, c.opts.ProbeTimeout, "quit"); err != nil {
		if c.probe(ctx, dir) != nil {
			if visible {
				logger.Info("MPS control daemon does not answer; killing it", "pid", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				c.waitExit(pid, c.opts.StopTimeout)
			}
			return nil
		}
		logger.Info("MPS control daemon did not take 'quit', but answers", "err", err)
	}
	if c.waitGone(ctx, dir, pid, visible) {
		return nil
	}
	if !visible {
		return fmt.Errorf("the MPS control daemon in %s still answers %s after 'quit' (its MPS servers may still have clients), "+
			"and its process is not visible from this plugin instance's PID namespace; its directory is kept and stopping it is retried",
			dir, c.opts.StopTimeout)
	}
	logger.Info("MPS control daemon did not quit in time; killing it", "pid", pid, "timeout", c.opts.StopTimeout)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if c.waitGone(ctx, dir, pid, visible) {
		return nil
	}
	return fmt.Errorf("the MPS control daemon in %s (pid %d) still runs after SIGKILL; its directory is kept", dir, pid)
}

// waitGone waits up to StopTimeout until the daemon of dir has exited, if
// its process is visible, and no longer answers.
func (c *MPSControl) waitGone(ctx context.Context, dir string, pid int, visible bool) bool {
	if visible {
		return c.waitExit(pid, c.opts.StopTimeout) && c.probe(ctx, dir) != nil
	}
	for end := time.Now().Add(c.opts.StopTimeout); ; time.Sleep(50 * time.Millisecond) {
		if c.probe(ctx, dir) != nil {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// waitExit waits until pid has exited (reaped, if it is our child).
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
	return !alive(pid)
}

// writePIDFile records the daemon's PID with the PID namespace it is valid
// in ("<pid>\n<namespace>\n"): another plugin instance, in a namespace of
// its own, knows that the number means nothing there.
func (c *MPSControl) writePIDFile(dir string, pid int) error {
	// Replaced atomically, so that a reader never sees a half-written
	// file; not fsynced, as the daemon does not outlive a reboot.
	if err := atomicfile.Write(filepath.Join(dir, pidFile), 0o644, atomicfile.SyncNone, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%d\n%s\n", pid, c.pidNS)
		return err
	}); err != nil {
		return fmt.Errorf("write MPS daemon pid file: %w", err)
	}
	return nil
}

// visibleDaemon returns the PID of dir's daemon if this process can see
// it: the pid file names a PID of our namespace (a file without a namespace,
// of an older version, counts as ours) and that process is alive, runs the
// daemon (-f) and has dir's pipe directory in its environment, so that a
// recycled PID never matches.
func (c *MPSControl) visibleDaemon(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 0 {
		return 0, false
	}
	if len(fields) > 1 && (c.pidNS == "" || fields[1] != c.pidNS) {
		return pid, false
	}
	return pid, c.isDaemonOf(pid, dir)
}

// isDaemonOf reports whether pid is alive and is the control daemon of dir.
func (c *MPSControl) isDaemonOf(pid int, dir string) bool {
	if !alive(pid) {
		return false
	}
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil || !IsControlDaemonCmdline(cmdline) {
		return false
	}
	env, err := os.ReadFile(filepath.Join(proc, "environ"))
	if err != nil {
		return false
	}
	pipes, ok := PipeDirectoryOf(env)
	return ok && pipes == filepath.Join(dir, pipeSubdir)
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
