package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/health"
)

// One publisher per node. During a DaemonSet rolling update (--pod-uid,
// kubeletplugin.RollingUpdate) the old and the new plugin pod run side by
// side on the node. Both serve the kubelet, which may call either, but if
// both published the node's pool, two ResourceSlice controllers would
// rewrite the same slices with whatever differs between them (health
// taints seen at different moments, a changed ignore list, a new slice
// layout) until the old pod stops.
//
// The rule: the instance that holds an exclusive flock on
// <plugin data dir>/publish.lock publishes; the other one waits for the
// lock, checking every publishLockRetry. The old pod holds it when the new
// one starts, so the old one keeps publishing until it exits (the kubelet
// stops it only once the new one is serving); then the kernel releases its
// lock, and the new one takes over: it adopts the health conditions the old
// one saved meanwhile, starts saving its own, and hands its resources to its
// helper's ResourceSlice controller, which reconciles the slices the old one
// left. An instance that dies releases the lock with its process, so a
// crashed publisher never blocks the node. The waiting instance keeps its
// health monitor and its kubelet services running; only its slice writes
// and health-state saves wait.
//
// Plugins older than this lock publish without it: when one of those is
// the old pod of a rolling update, both publish during that one overlap.

const publishLockFile = "publish.lock"

// publishLockRetry is how often a waiting instance tries to take the lock:
// the longest a node's slices go without a publisher after the old pod
// exits.
var publishLockRetry = time.Second

// sliceLeader takes the publish lock, now or once the other instance
// releases it, and makes this instance the publisher.
type sliceLeader struct {
	path   string
	holder string // written into the lock file, for the other instance's log
	pub    *publisher
	health *healthService // nil: monitoring off
	// first publishes the first slices directly (publishFirst) and returns
	// the pool generation to publish.
	first func(ctx context.Context) int64

	mu      sync.Mutex
	f       *os.File // open while the lock is held
	stopped bool
}

func newSliceLeader(o *Options, pub *publisher, hs *healthService, first func(context.Context) int64) *sliceLeader {
	pod := o.PodUID
	if pod == "" {
		pod = "-"
	}
	return &sliceLeader{path: filepath.Join(o.PluginDataDir(), publishLockFile), pub: pub, health: hs, first: first,
		holder: fmt.Sprintf("pod %s, pid %d", pod, os.Getpid())}
}

// start publishes at once if this instance gets the lock, or else waits for
// it in the background until ctx is done.
func (l *sliceLeader) start(ctx context.Context) error {
	ok, err := l.tryLead(ctx)
	if err != nil || ok {
		return err
	}
	holder, _ := os.ReadFile(l.path)
	klog.FromContext(ctx).Info("Another plugin instance publishes this node's ResourceSlices; this one serves the kubelet and takes over when the other stops",
		"lock", l.path, "holder", strings.TrimSpace(string(holder)))
	go l.await(ctx)
	return nil
}

// await retries the lock until it gets it or ctx is done.
func (l *sliceLeader) await(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(publishLockRetry)
	defer tick.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ok, err := l.tryLead(ctx)
		switch {
		case err != nil:
			if err.Error() != lastErr {
				logger.Error(err, "Cannot take over publishing this node's ResourceSlices; retrying")
			}
			lastErr = err.Error()
		case ok:
			logger.Info("Took over publishing this node's ResourceSlices from the plugin instance that stopped")
			return
		}
	}
}

// tryLead takes the lock if it is free and then publishes.
func (l *sliceLeader) tryLead(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.f != nil {
		return l.f != nil, nil
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false, fmt.Errorf("open the publish lock %s: %w; check that the plugin data directory is writable", l.path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		_ = f.Close()
		return false, nil
	}
	if err != nil {
		_ = f.Close()
		return false, fmt.Errorf("lock %s: %w", l.path, err)
	}
	l.f = f
	// Who holds it, for the log of an instance that waits (best effort).
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(l.holder+"\n"), 0)
	}
	if l.health != nil {
		l.health.mon.StartSaving(ctx)
	}
	if err := l.pub.lead(ctx, l.first(ctx)); err != nil {
		l.releaseLocked()
		return false, fmt.Errorf("publish ResourceSlices: %w", err)
	}
	return true, nil
}

// stop ends publishing and health-state saving, then releases the lock, so
// that the instance that takes over finds the final state. Call it after
// the helper stopped (its ResourceSlice controller writes nothing more).
func (l *sliceLeader) stop() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.releaseLocked()
}

func (l *sliceLeader) releaseLocked() {
	if l.f == nil {
		return
	}
	l.pub.resign()
	if l.health != nil {
		l.health.mon.StopSaving()
	}
	_ = l.f.Close() // releases the flock
	l.f = nil
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
