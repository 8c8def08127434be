package vfio

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// asyncKernel is memKernel whose writes take effect only after delay, one
// after the other in the order they were written, as with the local
// cluster's simulated kernel (a watcher acting after the write returned).
// A write never fails for the writer: a refusal is only recorded.
type asyncKernel struct {
	mu      sync.Mutex
	k       memKernel
	delay   time.Duration
	queue   chan func(*memKernel) error
	refused []error
	done    chan struct{}
}

func newAsyncKernel(driver, override string, delay time.Duration) *asyncKernel {
	a := &asyncKernel{k: memKernel{driver: driver, override: override}, delay: delay,
		queue: make(chan func(*memKernel) error, 16), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for op := range a.queue {
			time.Sleep(a.delay)
			a.mu.Lock()
			if err := op(&a.k); err != nil {
				a.refused = append(a.refused, err)
			}
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *asyncKernel) stop() { close(a.queue); <-a.done }

func (a *asyncKernel) read(f func(*memKernel) (string, error)) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return f(&a.k)
}

func (a *asyncKernel) Driver(addr string) (string, error) {
	return a.read(func(k *memKernel) (string, error) { return k.Driver(addr) })
}

func (a *asyncKernel) Override(addr string) (string, error) {
	return a.read(func(k *memKernel) (string, error) { return k.Override(addr) })
}

func (a *asyncKernel) IOMMUGroup(string) (int, error) { return 7, nil }
func (a *asyncKernel) CDev(string) (string, error)    { return "", nil }

func (a *asyncKernel) SetOverride(addr, d string) error {
	a.queue <- func(k *memKernel) error { return k.SetOverride(addr, d) }
	return nil
}

func (a *asyncKernel) Unbind(addr, d string) error {
	a.queue <- func(k *memKernel) error { return k.Unbind(addr, d) }
	return nil
}

func (a *asyncKernel) Bind(addr, d string) error {
	a.queue <- func(k *memKernel) error { return k.Bind(addr, d) }
	return nil
}

// TestMovesWithAsyncKernel: both moves succeed when each write's effect lands
// after the write returned (verify waits for the driver link), and a bind
// that never takes effect still fails, after verifyTimeout.
func TestMovesWithAsyncKernel(t *testing.T) {
	ctx := context.Background()
	toVFIO := func(s Sysfs) error { return ToVFIO(ctx, s, "a", nil) }
	toNVIDIA := func(s Sysfs) error { return ToNVIDIA(ctx, s, "a") }
	for _, tc := range []struct {
		name                     string
		driver, override         string
		delay                    time.Duration
		move                     func(Sysfs) error
		wantErr                  string
		wantDriver, wantOverride string
	}{
		{name: "to vfio-pci", driver: DriverNVIDIA, delay: 30 * time.Millisecond, move: toVFIO,
			wantDriver: DriverVFIO, wantOverride: DriverVFIO},
		{name: "to nvidia", driver: DriverVFIO, override: DriverVFIO, delay: 30 * time.Millisecond, move: toNVIDIA,
			wantDriver: DriverNVIDIA},
		{name: "bind never lands", driver: DriverNVIDIA, delay: time.Second, move: toVFIO,
			wantErr: `bound to "nvidia" after binding it to vfio-pci`, wantDriver: DriverVFIO, wantOverride: DriverVFIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := verifyTimeout
			verifyTimeout = 500 * time.Millisecond
			t.Cleanup(func() { verifyTimeout = old })
			a := newAsyncKernel(tc.driver, tc.override, tc.delay)
			err := tc.move(a)
			a.stop() // lets every queued write land
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Empty(t, a.refused, "the kernel refused a write")
			require.Equal(t, tc.wantDriver, a.k.driver)
			require.Equal(t, tc.wantOverride, a.k.override)
		})
	}
}
