package vfio

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// memKernel is one PCI device under the kernel's rules (bind fails while
// bound or when driver_override names another driver, vfio-pci binds only
// by override, unbind only from the bound driver), counting writes.
type memKernel struct {
	driver, override string
	busy             bool
	writes           int
	// failAt makes the nth write (1-based) fail, as a crash would stop there.
	failAt int
}

func (m *memKernel) write() error {
	m.writes++
	if m.writes == m.failAt {
		return errors.New("injected failure")
	}
	return nil
}

func (m *memKernel) Driver(string) (string, error)   { return m.driver, nil }
func (m *memKernel) Override(string) (string, error) { return m.override, nil }
func (m *memKernel) IOMMUGroup(string) (int, error)  { return 7, nil }
func (m *memKernel) CDev(string) (string, error)     { return "", nil }
func (m *memKernel) SetOverride(_, d string) error {
	if err := m.write(); err != nil {
		return err
	}
	m.override = d
	return nil
}

func (m *memKernel) Unbind(_, d string) error {
	if err := m.write(); err != nil {
		return err
	}
	if m.driver != d {
		return syscall.ENODEV
	}
	if d == DriverNVIDIA && m.busy {
		return syscall.EBUSY
	}
	m.driver = ""
	return nil
}

func (m *memKernel) Bind(_, d string) error {
	if err := m.write(); err != nil {
		return err
	}
	switch {
	case m.driver != "":
		return syscall.EBUSY
	case m.override != "" && m.override != d, m.override == "" && d != DriverNVIDIA:
		return syscall.ENODEV
	}
	m.driver = d
	return nil
}

func TestToVFIO(t *testing.T) {
	refuse := errors.New("MIG is on")
	tests := []struct {
		name             string
		driver, override string
		busy             bool
		check            error
		wantErr          string
		wantDriver       string
		wantWrites       int
	}{
		{name: "from nvidia", driver: DriverNVIDIA, wantDriver: DriverVFIO, wantWrites: 3},
		{name: "already on vfio-pci", driver: DriverVFIO, override: DriverVFIO, wantDriver: DriverVFIO},
		{name: "crashed after the override", driver: DriverNVIDIA, override: DriverVFIO, wantDriver: DriverVFIO, wantWrites: 2},
		{name: "crashed after unbind", override: DriverVFIO, wantDriver: DriverVFIO, wantWrites: 1},
		{name: "unbound without override", wantDriver: DriverVFIO, wantWrites: 2},
		{name: "in use: the override is taken back", driver: DriverNVIDIA, busy: true, wantErr: "still using it", wantDriver: DriverNVIDIA, wantWrites: 3},
		{name: "check refuses before any write", driver: DriverNVIDIA, check: refuse, wantErr: "MIG is on", wantDriver: DriverNVIDIA},
		{name: "another driver", driver: "nouveau", wantErr: `bound to driver "nouveau"`, wantDriver: "nouveau"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &memKernel{driver: tc.driver, override: tc.override, busy: tc.busy}
			err := ToVFIO(context.Background(), k, "0000:1b:00.0", func() error { return tc.check })
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantDriver, k.driver)
			require.Equal(t, tc.wantWrites, k.writes)
			if k.driver == DriverNVIDIA {
				require.Empty(t, k.override, "a GPU left on nvidia keeps no vfio-pci override")
			}
		})
	}
}

func TestToNVIDIA(t *testing.T) {
	tests := []struct {
		name             string
		driver, override string
		wantErr          string
		wantDriver       string
		wantWrites       int
	}{
		{name: "from vfio-pci", driver: DriverVFIO, override: DriverVFIO, wantDriver: DriverNVIDIA, wantWrites: 3},
		{name: "already on nvidia", driver: DriverNVIDIA, wantDriver: DriverNVIDIA},
		{name: "on nvidia with a stale override", driver: DriverNVIDIA, override: DriverVFIO, wantDriver: DriverNVIDIA, wantWrites: 1},
		{name: "crashed after clearing the override", driver: DriverVFIO, wantDriver: DriverNVIDIA, wantWrites: 2},
		{name: "crashed after unbind", wantDriver: DriverNVIDIA, wantWrites: 1},
		{name: "unbound, override still vfio-pci", override: DriverVFIO, wantDriver: DriverNVIDIA, wantWrites: 2},
		{name: "another driver", driver: "nouveau", wantErr: `bound to driver "nouveau"`, wantDriver: "nouveau"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &memKernel{driver: tc.driver, override: tc.override}
			err := ToNVIDIA(context.Background(), k, "0000:1b:00.0")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantDriver, k.driver)
			require.Equal(t, tc.wantWrites, k.writes)
		})
	}
}

// TestCrashAnywhereConverges stops each move at every write in turn, as a
// plugin crash would, and checks that running the move again (the
// restarted plugin's recovery) finishes it.
func TestCrashAnywhereConverges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		move     func(Sysfs) error
	}{
		{"to vfio-pci", DriverNVIDIA, DriverVFIO, func(s Sysfs) error { return ToVFIO(context.Background(), s, "a", nil) }},
		{"to nvidia", DriverVFIO, DriverNVIDIA, func(s Sysfs) error { return ToNVIDIA(context.Background(), s, "a") }},
	} {
		for failAt := 1; failAt <= 3; failAt++ {
			k := &memKernel{driver: tc.from, failAt: failAt}
			if tc.from == DriverVFIO {
				k.override = DriverVFIO
			}
			require.Error(t, tc.move(k), "%s: write %d fails", tc.name, failAt)
			k.failAt = 0
			require.NoError(t, tc.move(k), "%s: rerun after write %d failed", tc.name, failAt)
			require.Equal(t, tc.to, k.driver, "%s after a failure at write %d", tc.name, failAt)
			want := ""
			if tc.to == DriverVFIO {
				want = DriverVFIO
			}
			require.Equal(t, want, k.override)
		}
	}
}
