package sharing

import (
	"context"
	"time"
)

// DaemonRunner runs the control daemon processes of a claim (one per
// configuration group): MPSControl keeps
// the claim's bookkeeping (its directories, the probe through the pipe, the
// settings, orphans) and asks the runner only to start, stop and list the
// processes. Two runners exist: the plugin's own child processes
// (processRunner, the default: unit tests, a plugin run on a host) and a
// Pod per claim created through the API (internal/plugin/mpspod, what the
// chart uses), which outlives every restart of the plugin's container.
//
// Callers hold the claim's lock around every call for that claim.
type DaemonRunner interface {
	// Start starts the daemon of claimUID for d, whose directories
	// (d.Dir/pipe, log, shm) exist and hold no live daemon. It may set
	// d.PID. exited, if not nil, is closed when the daemon is known to have
	// ended (the start then failed); Start does not wait for it to answer.
	Start(ctx context.Context, claimUID string, d *MPSDaemon) (exited <-chan struct{}, err error)
	// Stop ends the claim's daemon of group (directory dir), if any runs,
	// and waits until it is gone. It returns an error if it may still run;
	// the caller then keeps dir.
	Stop(ctx context.Context, claimUID string, group int, dir string) error
	// Abort ends what a failed Start left running (best effort).
	Abort(ctx context.Context, claimUID string, d *MPSDaemon)
	// Daemons lists the daemons of this runner, found other than through
	// their directories (nil: only directories count).
	Daemons(ctx context.Context) ([]DaemonRef, error)
	// Describe says what is known about the claim's daemon of group, for
	// an error message (the end of its output, the Pod's state).
	Describe(ctx context.Context, claimUID string, group int, dir string) string
}

// DaemonRef names one daemon: its claim and configuration group.
type DaemonRef struct {
	ClaimUID string
	Group    int
}

// RunnerOptions are the timeouts that fit a runner: a Pod starts and stops
// in seconds, a process in milliseconds.
type RunnerOptions struct {
	// StartTimeout bounds the wait for a new daemon to answer (0: keep).
	StartTimeout time.Duration
	// StopTimeout bounds the wait for a daemon to be gone (0: keep).
	StopTimeout time.Duration
}

// UseRunner makes c start and stop daemons through r instead of as its own
// child processes. Call it before c is used.
func (c *MPSControl) UseRunner(r DaemonRunner, o RunnerOptions) {
	c.runner = r
	if o.StartTimeout > 0 {
		c.opts.StartTimeout = o.StartTimeout
	}
	if o.StopTimeout > 0 {
		c.opts.StopTimeout = o.StopTimeout
	}
}

// UseShm sets MPSOptions.ShmTmpfs and ShmSize. Call it before c is used.
func (c *MPSControl) UseShm(tmpfs bool, size string) {
	c.opts.ShmTmpfs, c.opts.ShmSize = tmpfs, size
}
