package cdplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
)

var _ computedomain.Store = records{}

// Lock implements computedomain.Store with an exclusive flock on r.lock.
// Each call opens the file anew, so that the flock excludes the other
// goroutines of this process as well as the other instance of the plugin
// (flock locks belong to an open file description). The holders change a
// node label or node list between the lock and the unlock: short, bounded
// by their API calls. The file stays; it holds nothing.
func (r records) Lock(context.Context) (func(), error) {
	f, err := os.OpenFile(r.lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the lock of the prepared ComputeDomain claims' records (is the plugin directory writable?): %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
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
