package sharing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// processRunner runs each claim's daemon as a child process of the plugin,
// in a session of its own. It is the runner of unit tests and of a plugin
// run directly on a host; in a container the daemon ends with the
// container (see DaemonRunner for the Pod runner).
type processRunner struct{ c *MPSControl }

var _ DaemonRunner = processRunner{}

// Start implements DaemonRunner: `<control> -f`, its output in
// log/daemon.out, its PID in the claim's pid file.
func (p processRunner) Start(ctx context.Context, claimUID string, d *MPSDaemon) (<-chan struct{}, error) {
	c := p.c
	out, err := os.OpenFile(filepath.Join(d.Dir, logSubdir, "daemon.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create MPS daemon output file: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(c.opts.ControlPath, "-f")
	cmd.Env = append(c.env(d.Dir), "CUDA_VISIBLE_DEVICES="+strings.Join(d.Devices, ","))
	cmd.Stdout, cmd.Stderr = out, out
	// Own session: a signal to the plugin's process group does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start MPS control daemon %s: %w; set --mps-control-path to the driver's nvidia-cuda-mps-control", c.opts.ControlPath, err)
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
	if err := c.writePIDFile(d.Dir, d.PID); err != nil {
		return done, err
	}
	return done, nil
}

// Abort implements DaemonRunner: the process is killed unless it has
// exited, and reaped.
func (p processRunner) Abort(_ context.Context, _ string, d *MPSDaemon) {
	if d.PID <= 0 {
		return
	}
	p.c.mu.Lock()
	done, child := p.c.exited[d.PID]
	p.c.mu.Unlock()
	if !child {
		return
	}
	select {
	case <-done:
	default:
		_ = syscall.Kill(d.PID, syscall.SIGKILL)
	}
	p.c.waitExit(d.PID, p.c.opts.StopTimeout)
}

// Stop implements DaemonRunner through the pipe ("quit"; see stopDaemon).
func (p processRunner) Stop(ctx context.Context, _ string, _ int, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil // a process daemon is reached only through its directory
	}
	return p.c.stopDaemon(ctx, dir)
}

// Daemons implements DaemonRunner: processes are found by their directories.
func (processRunner) Daemons(context.Context) ([]DaemonRef, error) { return nil, nil }

// Describe implements DaemonRunner: the end of the daemon's output.
func (p processRunner) Describe(_ context.Context, _ string, _ int, dir string) string {
	return p.c.tail(dir)
}
