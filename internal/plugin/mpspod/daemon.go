package mpspod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// DaemonOptions are the arguments of `gpu-kubelet-plugin mps-control-daemon`
// (PodConfig.Pod writes them).
type DaemonOptions struct {
	// Control is nvidia-cuda-mps-control, inside Chroot if that is set.
	Control string
	// Chroot, if set, is the driver root the daemon runs chrooted into.
	Chroot string
	// PipeDir and LogDir are the daemon's directories as this process sees
	// them (inside Chroot when chrooted).
	PipeDir, LogDir string
	// Devices are the GPUs' UUIDs (CUDA_VISIBLE_DEVICES).
	Devices []string
	// Settings are control commands sent once the daemon answers, at every
	// start of the container (a restarted daemon has lost them).
	Settings []string
	// StartTimeout bounds the wait for the daemon to answer (default 60s);
	// StopTimeout the wait for it to quit (default 20s).
	StartTimeout, StopTimeout time.Duration
}

// RunDaemon runs the control daemon in the foreground until ctx is done (the
// Pod is deleted: "quit" is sent and the daemon waited for) or the daemon
// exits (its status is returned: the Pod's restartPolicy OnFailure starts a
// daemon that failed again, one that quit through its pipe stays ended).
func RunDaemon(ctx context.Context, o DaemonOptions) error {
	logger := klog.FromContext(ctx)
	if o.StartTimeout <= 0 {
		o.StartTimeout = time.Minute
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 20 * time.Second
	}
	hostLog, hostPipe := o.LogDir, o.PipeDir
	if o.Chroot != "" {
		hostLog, hostPipe = filepath.Join(o.Chroot, o.LogDir), filepath.Join(o.Chroot, o.PipeDir)
	}
	out, err := os.OpenFile(filepath.Join(hostLog, "daemon.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open the daemon's output file: %w", err)
	}
	defer out.Close()
	// What a daemon that died left in the pipe directory would make the
	// new one's clients fail; its socket is replaced by the new daemon.
	_ = os.Remove(filepath.Join(hostPipe, sharing.ControlPIDFile))
	cmd := o.command(context.WithoutCancel(ctx), "-f")
	cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+strings.Join(o.Devices, ","))
	w := io.MultiWriter(os.Stdout, out)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", o.Control, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logger.Info("Started MPS control daemon", "pid", cmd.Process.Pid, "devices", o.Devices, "chroot", o.Chroot)
	if err := o.configure(ctx, exited); err != nil {
		if errors.Is(err, errExitedAtStart) {
			return err
		}
		if ctx.Err() == nil {
			_ = cmd.Process.Kill()
			if werr := <-exited; werr != nil {
				logger.V(4).Info("MPS control daemon killed", "status", werr)
			}
			return err
		}
		// The Pod was deleted while the daemon started: stopped like a
		// configured one (its settings need no finishing), not killed.
		logger.V(2).Info("Pod ended while the MPS control daemon started", "err", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("MPS control daemon exited: %w", err)
		}
		logger.Info("MPS control daemon quit")
		return nil
	case <-ctx.Done():
	}
	logger.Info("Stopping MPS control daemon")
	if stopped := o.quit(ctx, exited, cmd.Process); stopped {
		return nil
	}
	select {
	case err := <-exited:
		if err != nil {
			logger.Info("MPS control daemon ended after 'quit' with an error", "err", err)
		}
	case <-time.After(o.StopTimeout):
		logger.Info("MPS control daemon did not quit in time; killing it", "timeout", o.StopTimeout)
		_ = cmd.Process.Kill()
		if err := <-exited; err != nil {
			logger.V(4).Info("MPS control daemon killed", "status", err)
		}
	}
	return nil
}

// quit sends "quit" until the daemon takes it (one still starting has no
// socket yet: killed, it would leave one behind) or StopTimeout has passed,
// then kills it. It reports whether the daemon already ended meanwhile.
func (o DaemonOptions) quit(ctx context.Context, exited <-chan error, p *os.Process) (ended bool) {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(o.StopTimeout)
	for {
		_, err := o.client(context.WithoutCancel(ctx), min(5*time.Second, max(time.Until(deadline), time.Second)), "quit")
		if err == nil {
			return false
		}
		select {
		case werr := <-exited:
			logger.Info("MPS control daemon ended before it took 'quit'", "status", werr)
			return true
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			logger.Error(err, "'quit' not taken; killing the daemon", "timeout", o.StopTimeout)
			_ = p.Kill()
			return false
		}
	}
}

// errExitedAtStart: configure saw the daemon exit (its status is wrapped).
var errExitedAtStart = errors.New("MPS control daemon exited at start")

// configure waits until the daemon answers, then sends the settings.
func (o DaemonOptions) configure(ctx context.Context, exited <-chan error) error {
	deadline := time.Now().Add(o.StartTimeout)
	for {
		answer, err := o.client(ctx, 5*time.Second, sharing.ProbeCommand)
		if err == nil && sharing.ProbeAnswered(answer) {
			break
		}
		select {
		case err := <-exited:
			if err == nil {
				return fmt.Errorf("%w with status 0", errExitedAtStart)
			}
			return fmt.Errorf("%w: %w", errExitedAtStart, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MPS control daemon did not answer within %s: %w (%q)", o.StartTimeout, err, answer)
		}
	}
	if len(o.Settings) > 0 {
		if out, err := o.client(ctx, 10*time.Second, o.Settings...); err != nil {
			return fmt.Errorf("apply the MPS settings %q: %w: %s", o.Settings, err, out)
		}
	}
	return nil
}

// client runs the control tool in client mode with cmds on stdin.
func (o DaemonOptions) client(ctx context.Context, timeout time.Duration, cmds ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := o.command(ctx)
	var out bytes.Buffer
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("no answer within %s", timeout))
	}
	return out.String(), err
}

// command is the control tool with the daemon's directories, chrooted into
// the driver root if one is set.
func (o DaemonOptions) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, o.Control, args...)
	cmd.Env = append(os.Environ(), sharing.PipeDirEnv+"="+o.PipeDir, "CUDA_MPS_LOG_DIRECTORY="+o.LogDir)
	if o.Chroot != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: o.Chroot}
		cmd.Dir = "/"
	}
	return cmd
}
