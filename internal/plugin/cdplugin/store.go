package cdplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
)

var _ computedomain.Store = records{}

// lockPollMax is the longest wait between two tries of a held lock.
const lockPollMax = 20 * time.Millisecond

// Lock implements computedomain.Store with an exclusive flock on r.lock.
// Each call opens the file anew, so that the flock excludes the other
// goroutines of this process as well as the other instance of the plugin
// (flock locks belong to an open file description). The holders change a
// node label or node list between the lock and the unlock: short, bounded
// by their API calls. A held lock is tried again (after 1ms, doubling up
// to lockPollMax) until ctx ends. The file stays; it holds nothing.
func (r records) Lock(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(r.lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the lock of the prepared ComputeDomain claims' records (is the plugin directory writable?): %w", err)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, lockPollMax) {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for %s, the lock of the prepared ComputeDomain claims' records, which another call or "+
				"instance of the plugin holds (the kubelet retries the call): %w", r.lock, context.Cause(ctx))
		case <-time.After(wait):
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s, the lock of the prepared ComputeDomain claims' records: %w", r.lock, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the flock
}

// Claim implements computedomain.Store: the record of uid, read from its
// file alone.
func (r records) Claim(_ context.Context, uid types.UID) (computedomain.PreparedClaim, bool, error) {
	path, err := r.path(uid)
	if err != nil {
		return computedomain.PreparedClaim{}, false, err
	}
	c, err := r.read(path, uid)
	if errors.Is(err, fs.ErrNotExist) {
		return computedomain.PreparedClaim{}, false, nil
	}
	if err != nil {
		return computedomain.PreparedClaim{}, false, err
	}
	return c, true, nil
}

// Claims implements computedomain.Store (load).
func (r records) Claims(ctx context.Context) ([]computedomain.PreparedClaim, error) {
	return r.load(ctx)
}

// Put implements computedomain.Store (put).
func (r records) Put(_ context.Context, c computedomain.PreparedClaim) error { return r.put(c) }

// Remove implements computedomain.Store (remove).
func (r records) Remove(_ context.Context, uid types.UID) error { return r.remove(uid) }
