package publishlock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
)

const retry = 20 * time.Millisecond

// instance counts how often a Lock led and resigned.
type instance struct {
	leads, resigns atomic.Int32
	fail           atomic.Bool // Lead fails while set
}

func (i *instance) config(dir, pod string) Config {
	return Config{Dir: dir, PodUID: pod, Retry: retry,
		Lead: func(context.Context) error {
			if i.fail.Load() {
				return errors.New("API server refused")
			}
			i.leads.Add(1)
			return nil
		},
		Resign: func() { i.resigns.Add(1) }}
}

// TestOneLeaderAndTakeover: two instances on one plugin data directory (an
// flock conflicts between two open files of one process as between two
// processes). The first leads, the second waits and reads who holds the
// lock; once the first stops, the second takes over within a few retries.
func TestOneLeaderAndTakeover(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	var old, cur instance
	l1, err := Start(ctx, old.config(dir, "old-pod"))
	require.NoError(t, err)
	defer l1.Stop()
	require.True(t, l1.Leading())
	require.Equal(t, int32(1), old.leads.Load())
	require.Regexp(t, `^pod old-pod, pid [0-9]+$`, l1.Holder())

	l2, err := Start(ctx, cur.config(dir, "new-pod"))
	require.NoError(t, err)
	defer l2.Stop()
	time.Sleep(10 * retry)
	require.False(t, l2.Leading(), "two instances lead at once")
	require.Zero(t, cur.leads.Load())
	require.Regexp(t, `^pod old-pod, pid [0-9]+$`, l2.Holder(), "the waiting instance reads who holds the lock")

	l1.StopWaiting()
	time.Sleep(5 * retry)
	require.True(t, l1.Leading(), "a holder keeps the lock until Stop")
	require.False(t, l2.Leading())
	require.Zero(t, old.resigns.Load())

	l1.Stop()
	require.Equal(t, int32(1), old.resigns.Load(), "the stopping instance resigned")
	require.False(t, l1.Leading())
	require.Eventually(t, l2.Leading, 5*time.Second, retry, "the waiting instance takes over")
	require.Equal(t, int32(1), cur.leads.Load())
	require.Regexp(t, `^pod new-pod, pid [0-9]+$`, l2.Holder())
	l1.Stop() // a second Stop does nothing
	require.Equal(t, int32(1), old.resigns.Load())
}

// TestWaitEnds: a waiting instance whose context ends, or that is stopped,
// never leads, not even once the lock is free.
func TestWaitEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(cancel context.CancelFunc, l *Lock)
	}{
		{"context cancelled", func(cancel context.CancelFunc, _ *Lock) { cancel() }},
		{"stopped", func(_ context.CancelFunc, l *Lock) { l.Stop() }},
		{"stopped waiting", func(_ context.CancelFunc, l *Lock) { l.StopWaiting() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			var old, cur instance
			l1, err := Start(ctx, old.config(dir, "old-pod"))
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			l2, err := Start(wctx, cur.config(dir, "new-pod"))
			require.NoError(t, err)
			defer l2.Stop()
			tc.end(cancel, l2)
			l1.Stop()
			time.Sleep(10 * retry)
			require.False(t, l2.Leading())
			require.Zero(t, cur.leads.Load())
			// The lock is free for a third instance.
			var next instance
			l3, err := Start(ctx, next.config(dir, "next-pod"))
			require.NoError(t, err)
			defer l3.Stop()
			require.True(t, l3.Leading())
		})
	}
}

// TestLeadFails: a Lead that fails gives the lock up again. At Start the
// error is returned; while waiting, the next retry leads again.
func TestLeadFails(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	var a instance
	a.fail.Store(true)
	_, err := Start(ctx, a.config(dir, "a"))
	require.ErrorContains(t, err, "publish ResourceSlices: API server refused")
	require.Equal(t, int32(1), a.resigns.Load(), "resigned before giving the lock up")

	var b, c instance
	lb, err := Start(ctx, b.config(dir, "b"))
	require.NoError(t, err, "the failed instance left the lock free")
	require.True(t, lb.Leading())
	c.fail.Store(true)
	lc, err := Start(ctx, c.config(dir, "c"))
	require.NoError(t, err)
	defer lc.Stop()
	lb.Stop()
	time.Sleep(10 * retry)
	require.False(t, lc.Leading(), "a failed Lead holds no lock")
	c.fail.Store(false)
	require.Eventually(t, lc.Leading, 5*time.Second, retry, "the next retry leads")
	require.Equal(t, int32(1), c.leads.Load())
}

// TestUnusableDir: a lock that cannot be created is an error naming it.
func TestUnusableDir(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := filepath.Join(t.TempDir(), "missing")
	_, err := Start(ctx, Config{Dir: dir})
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, filepath.Join(dir, FileName))
}
