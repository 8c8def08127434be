package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// start runs a component in the background in its own session, with its
// output in logs/<name>.log and its PID in pids/<name>.pid. The process
// outlives the caller (the CLI exits after `up`). Every command line names
// the cluster directory (a flag or a config file under it), which is how a
// recorded PID is told from a recycled one.
func (c *Cluster) start(name string, argv []string, env []string) (int, error) {
	logf, err := os.OpenFile(c.Log(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open the log of %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	_, _ = fmt.Fprintf(logf, "=== %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s (%s): %w", name, argv[0], err)
	}
	pid := cmd.Process.Pid
	// Reap it if it exits while we still run; it is not our child to wait for
	// otherwise.
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(c.PIDFile(name), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return pid, fmt.Errorf("record the PID of %s: %w", name, err)
	}
	c.logf("started %s (pid %d)", name, pid)
	return pid, nil
}

// pid returns the live PID recorded for a component, or 0.
func (c *Cluster) pid(name string) int {
	b, err := os.ReadFile(c.PIDFile(name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !c.ours(pid) {
		return 0
	}
	return pid
}

// ours tells whether pid is alive and its command line names the cluster dir.
func (c *Cluster) ours(pid int) bool {
	if !alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return err == nil && bytes.Contains(cmdline, []byte(c.Dir))
}

// stop sends SIGTERM, then SIGKILL after the stop timeout.
func (c *Cluster) stop(name string) {
	pid := c.pid(name)
	if pid == 0 {
		_ = os.Remove(c.PIDFile(name))
		return
	}
	stopPID(pid, c.cfg.StopTimeout)
	_ = os.Remove(c.PIDFile(name))
	c.logf("stopped %s (pid %d)", name, pid)
}

func stopPID(pid int, timeout time.Duration) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 50 && alive(pid); i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

func alive(pid int) bool {
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(st, ')')
	return i < 0 || len(st) <= i+2 || st[i+2] != 'Z'
}

// waitFor polls check until it returns nil, the timeout passes, or one of
// the watched components exits. A failure names what was awaited and shows
// the tail of the watched components' logs.
func (c *Cluster) waitFor(ctx context.Context, what string, watch []string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WaitTimeout)
	defer cancel()
	var last error
	gone := map[string]int{}
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		// Twice in a row: a process that has just been started may not show
		// its new command line for a moment.
		for _, w := range watch {
			if c.pid(w) != 0 {
				gone[w] = 0
				continue
			}
			if gone[w]++; gone[w] > 1 {
				return fmt.Errorf("waiting for %s: %s exited\n%s", what, w, c.tail(w, 30))
			}
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("waiting for %s: not done after %s (last: %v)", what, c.cfg.WaitTimeout, last)
			for _, w := range watch {
				msg += "\n" + c.tail(w, 20)
			}
			return errors.New(msg)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tail returns the last lines of a component's log.
func (c *Cluster) tail(name string, lines int) string {
	b, err := os.ReadFile(c.Log(name))
	if err != nil {
		return fmt.Sprintf("----- %s: no log -----", name)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return fmt.Sprintf("----- last lines of %s -----\n%s\n----- end of %s -----", c.Log(name), strings.Join(all, "\n"), name)
}

// run runs a short command and returns its combined output, the output in
// the error when it fails.
func run(ctx context.Context, argv ...string) (string, error) {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}
