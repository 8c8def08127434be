// Package publishlock makes one kubelet plugin instance per node and driver
// the publisher of the node's ResourceSlices.
//
// During a DaemonSet rolling update (--pod-uid, kubeletplugin.RollingUpdate)
// the old and the new plugin pod run side by side on the node. Both serve
// the kubelet, which may call either, but if both published the node's
// pool, two ResourceSlice controllers would rewrite the same slices with
// whatever differs between them until the old pod stops.
//
// The rule: the instance that holds an exclusive flock on
// <plugin data dir>/publish.lock publishes; the other one waits for the
// lock, trying it every Config.Retry. The old pod holds it when the new one
// starts, so the old one keeps publishing until it exits (the kubelet stops
// it only once the new one is serving); then the kernel releases its lock
// and the new one takes over. An instance that dies releases the lock with
// its process, so a crashed publisher never blocks the node. The holder
// writes its pod UID and PID into the file, for the waiting instance's log.
//
// Plugins older than this lock publish without it: when one of those is
// the old pod of a rolling update, both publish during that one overlap.
package publishlock

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
)

// FileName is the lock's file in the plugin data directory.
const FileName = "publish.lock"

// DefaultRetry is how often a waiting instance tries to take the lock: the
// longest a node's slices go without a publisher after the old pod exits.
const DefaultRetry = time.Second

// Config says where the lock is and what holding it means.
type Config struct {
	// Dir is the plugin data directory, shared by the instances of one
	// driver on the node.
	Dir string
	// PodUID names this instance in the lock file (empty: "-").
	PodUID string
	// Retry is how often a waiting instance tries the lock; 0: DefaultRetry.
	Retry time.Duration
	// Lead is called with the lock just taken: this instance publishes from
	// now on. An error gives the lock up again (after Resign); a waiting
	// instance tries again at its next retry.
	Lead func(ctx context.Context) error
	// Resign, if set, is called with the lock still held before it is
	// given up: this instance publishes nothing more.
	Resign func()
}

// Lock is one instance's claim on the node's publish lock.
type Lock struct {
	cfg    Config
	path   string
	holder string // written into the lock file

	mu      sync.Mutex
	f       *os.File // open while the lock is held
	stopped bool
}

// Start takes the lock and leads at once if the lock is free, or else
// waits for it in the background until ctx is done or Stop is called. An
// error means the lock could not be tried (or Lead failed with it held);
// then nothing waits.
func Start(ctx context.Context, cfg Config) (*Lock, error) {
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	pod := cfg.PodUID
	if pod == "" {
		pod = "-"
	}
	l := &Lock{cfg: cfg, path: filepath.Join(cfg.Dir, FileName), holder: fmt.Sprintf("pod %s, pid %d", pod, os.Getpid())}
	ok, err := l.try(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		return l, nil
	}
	klog.FromContext(ctx).Info("Another plugin instance publishes this node's ResourceSlices; this one serves the kubelet and takes over when the other stops",
		"lock", l.path, "holder", l.Holder())
	go l.await(ctx)
	return l, nil
}

// Holder is what the lock file says about its holder (best effort: empty
// when it cannot be read).
func (l *Lock) Holder() string {
	b, _ := os.ReadFile(l.path)
	return strings.TrimSpace(string(b))
}

// Leading reports whether this instance holds the lock.
func (l *Lock) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f != nil
}

// await retries the lock until it gets it, ctx is done or Stop was called.
func (l *Lock) await(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(l.cfg.Retry)
	defer tick.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ctx.Err() != nil { // select picks either when both are ready
			return
		}
		ok, err := l.try(ctx)
		switch {
		case errors.Is(err, errStopped):
			return
		case err != nil:
			if err.Error() != lastErr {
				logger.Error(err, "Cannot take over publishing this node's ResourceSlices; retrying", "lock", l.path)
			}
			lastErr = err.Error()
		case ok:
			logger.Info("Took over publishing this node's ResourceSlices from the plugin instance that stopped", "lock", l.path)
			return
		}
	}
}

var errStopped = errors.New("publish lock stopped")

// try takes the lock if it is free and then leads.
func (l *Lock) try(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false, errStopped
	}
	if l.f != nil {
		return true, nil
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
	if l.cfg.Lead != nil {
		if err := l.cfg.Lead(ctx); err != nil {
			l.releaseLocked()
			return false, fmt.Errorf("publish ResourceSlices: %w", err)
		}
	}
	return true, nil
}

// StopWaiting ends a wait for the lock: from now on this instance never
// leads. A holder keeps the lock until Stop. Call it before stopping what
// Lead starts (the kubelet plugin helper), so that a takeover cannot start
// publishing through it meanwhile. A nil Lock does nothing.
func (l *Lock) StopWaiting() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
}

// Stop ends leading (Resign) and releases the lock, or ends the wait for
// it. Call it after the instance's ResourceSlice controller stopped (it
// writes nothing more), so that the instance that takes over finds the
// final state. A nil Lock does nothing.
func (l *Lock) Stop() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.releaseLocked()
}

func (l *Lock) releaseLocked() {
	if l.f == nil {
		return
	}
	if l.cfg.Resign != nil {
		l.cfg.Resign()
	}
	_ = l.f.Close() // releases the flock
	l.f = nil
}
