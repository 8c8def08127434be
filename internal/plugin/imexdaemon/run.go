package imexdaemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/shared/imex"
)

// ErrKeepsDying: nvidia-imex died MaxRestarts times in a row.
var ErrKeepsDying = errors.New("nvidia-imex keeps dying")

// child is one started nvidia-imex.
type child struct {
	cmd     *exec.Cmd
	exited  chan error
	started time.Time
}

// Run writes the configuration and the node list, then runs nvidia-imex in
// the foreground until ctx ends (SIGTERM or SIGINT to this process: the
// signal is passed on and the child waited for). nvidia-imex starts once the
// node list names at least one address (the node side may write it after
// the pod starts). A changed node list restarts it: that is how NVIDIA's
// daemon makes nvidia-imex take a new list of addresses. A child that dies
// is restarted after a backoff; one that dies MaxRestarts times in a row,
// each within StableAfter of its start, ends Run with ErrKeepsDying.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	if err := o.Validate(true); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	bin, err := o.tool(imex.DaemonBinary)
	if err != nil {
		return err
	}
	if err := o.writeConfig(); err != nil {
		return err
	}
	nodes, err := o.readNodes()
	if err != nil {
		return err
	}
	if err := o.writeNodes(nodes); err != nil {
		return err
	}
	var c *child // nil while the node list is empty
	exited := func() <-chan error {
		if c == nil {
			return nil
		}
		return c.exited
	}
	if len(nodes) > 0 {
		logger.Info("Starting nvidia-imex", "binary", bin, "chroot", o.DriverRoot, "config", o.configPath(), "nodes", string(nodes))
		if c, err = o.start(ctx, bin); err != nil {
			return err
		}
	} else {
		logger.Info("The domain's node list is empty; nvidia-imex starts once it names an address", "nodesConfig", o.NodesConfig)
	}
	failures, backoff := 0, o.Backoff
	poll := time.NewTicker(o.Poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			if c != nil {
				logger.Info("Stopping nvidia-imex")
				o.stop(ctx, c)
			}
			// The pod goes (its domain was deleted or left the node): its
			// directory would stay in the driver root's tmp for good. A
			// daemon that starts again writes it anew.
			if err := os.RemoveAll(o.hostPath(o.workDir())); err != nil {
				logger.Error(err, "The IMEX daemon's directory in the driver root was not removed")
			}
			return nil
		case <-poll.C:
			next, err := o.readNodes()
			if err != nil {
				logger.Error(err, "Node list not read; nvidia-imex keeps the last one")
				continue
			}
			if bytes.Equal(next, nodes) {
				continue
			}
			if err := o.writeNodes(next); err != nil {
				return err
			}
			nodes = next
			if c != nil {
				logger.Info("Node list changed; restarting nvidia-imex", "nodes", string(nodes))
				o.stop(ctx, c)
				c = nil
			}
			if len(nodes) == 0 {
				logger.Info("The domain's node list is empty; nvidia-imex waits for addresses")
				continue
			}
			if c, err = o.start(ctx, bin); err != nil {
				return err
			}
		case werr := <-exited():
			if time.Since(c.started) >= o.StableAfter {
				failures, backoff = 0, o.Backoff
			}
			failures++
			if failures >= o.MaxRestarts {
				return fmt.Errorf("%w: it exited %d times in a row within %s of its start, the last time with %v; its output above says why (is the IMEX package's version the driver's? is SERVER_PORT %d free?)",
					ErrKeepsDying, failures, o.StableAfter, exitText(werr), o.ServerPort)
			}
			logger.Error(werr, "nvidia-imex exited; restarting it", "after", backoff, "failures", failures, "max", o.MaxRestarts)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			if c, err = o.start(ctx, bin); err != nil {
				return err
			}
		}
	}
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// start starts nvidia-imex with the generated configuration; its output is
// this process's.
func (o *Options) start(ctx context.Context, bin string) (*child, error) {
	cmd := o.command(context.WithoutCancel(ctx), bin, "-c", o.configPath())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (chrooted into %q): %w", bin, o.DriverRoot, err)
	}
	c := &child{cmd: cmd, exited: make(chan error, 1), started: time.Now()}
	go func() { c.exited <- cmd.Wait() }()
	klog.FromContext(ctx).V(2).Info("Started nvidia-imex", "pid", cmd.Process.Pid)
	return c, nil
}

// stop sends SIGTERM, the signal that ends nvidia-imex as a service, and
// kills the child if it has not ended after StopTimeout.
func (o *Options) stop(ctx context.Context, c *child) {
	logger := klog.FromContext(ctx)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.exited:
		logger.V(2).Info("nvidia-imex ended", "status", exitText(err))
	case <-time.After(o.StopTimeout):
		logger.Info("nvidia-imex did not end after SIGTERM; killing it", "timeout", o.StopTimeout)
		_ = c.cmd.Process.Kill()
		if err := <-c.exited; err != nil {
			logger.V(4).Info("nvidia-imex killed", "status", err)
		}
	}
}
