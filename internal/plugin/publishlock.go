package plugin

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/publishlock"
)

// sliceLeader makes this instance the node's publisher of the GPU pool
// while it holds the publish lock (internal/plugin/publishlock, which says
// why and how). On taking the lock it adopts the health conditions the
// other instance saved meanwhile, starts saving its own, and hands its
// resources to its helper's ResourceSlice controller, which reconciles the
// slices the other one left. The waiting instance keeps its health monitor
// and its kubelet services running; only its slice writes and health-state
// saves wait.
type sliceLeader struct {
	o      *Options
	pub    *publisher
	health *healthService // nil: monitoring off
	// first publishes the first slices directly (publishFirst) and returns
	// the pool generation to publish.
	first func(ctx context.Context) int64
	lock  *publishlock.Lock
}

func newSliceLeader(o *Options, pub *publisher, hs *healthService, first func(context.Context) int64) *sliceLeader {
	return &sliceLeader{o: o, pub: pub, health: hs, first: first}
}

// start publishes at once if this instance gets the lock, or else waits for
// it in the background until ctx is done.
func (l *sliceLeader) start(ctx context.Context) error {
	lock, err := publishlock.Start(ctx, publishlock.Config{Dir: l.o.PluginDataDir(), PodUID: l.o.PodUID,
		Lead: func(ctx context.Context) error {
			if l.health != nil {
				l.health.mon.StartSaving(ctx)
			}
			return l.pub.lead(ctx, l.first(ctx))
		},
		Resign: func() {
			l.pub.resign()
			if l.health != nil {
				l.health.mon.StopSaving()
			}
		},
	})
	l.lock = lock
	return err
}

// stopWaiting: an instance that waits for the lock never takes it from
// now on (one that holds it keeps it until stop).
func (l *sliceLeader) stopWaiting() {
	if l != nil {
		l.lock.StopWaiting()
	}
}

// stop ends publishing and health-state saving, then releases the lock, so
// that the instance that takes over finds the final state. Call it after
// the helper stopped (its ResourceSlice controller writes nothing more).
func (l *sliceLeader) stop() {
	if l != nil {
		l.lock.Stop()
	}
}

// healthStateFile keeps the health monitor's conditions across restarts.
func (o *Options) healthStateFile() string {
	return filepath.Join(o.PluginDataDir(), "health-state.json")
}

// persistHealth makes the monitor keep its conditions in the plugin data
// directory for the current boot.
func (o *Options) persistHealth(cfg *health.Config) error {
	bootID, err := checkpoint.CurrentBootID()
	if err != nil {
		return fmt.Errorf("health monitor: %w", err)
	}
	cfg.StateFile, cfg.BootID = o.healthStateFile(), bootID
	return nil
}
