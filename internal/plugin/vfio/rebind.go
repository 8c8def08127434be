package vfio

import (
	"context"
	"fmt"
	"time"
)

// ToVFIO binds the GPU at addr to vfio-pci: driver_override names vfio-pci
// (so that no other driver, nvidia included, can claim the device while it is
// unbound), the device is unbound from nvidia, then bound to vfio-pci.
//
// Every step reads the device's state first, so ToVFIO converges from any
// point a crash can leave it at (override written, device unbound, bound):
// running it again finishes the move, and a device already on vfio-pci is
// left alone. check runs while the device is still on nvidia, before
// anything is changed; its error refuses the move (the GPU is in use, MIG is
// on). A device bound to any other driver is refused.
func ToVFIO(ctx context.Context, sys Sysfs, addr string, check func() error) error {
	driver, err := sys.Driver(addr)
	if err != nil {
		return err
	}
	switch driver {
	case DriverVFIO:
		return nil
	case DriverNVIDIA:
		if check != nil {
			if err := check(); err != nil {
				return fmt.Errorf("GPU %s cannot be passed through: %w", addr, err)
			}
		}
	case "":
	default:
		return fmt.Errorf("GPU %s is bound to driver %q, not %s or %s: not touching it", addr, driver, DriverNVIDIA, DriverVFIO)
	}
	if err := ensureOverride(sys, addr, DriverVFIO); err != nil {
		return err
	}
	if driver == DriverNVIDIA {
		if err := sys.Unbind(addr, DriverNVIDIA); err != nil {
			// Still on nvidia: take the override back (best effort), so
			// that a later probe does not hand the GPU to vfio-pci.
			_ = sys.SetOverride(addr, "")
			return fmt.Errorf("unbind GPU %s from %s (is a process still using it?): %w", addr, DriverNVIDIA, err)
		}
	}
	if err := sys.Bind(addr, DriverVFIO); err != nil {
		return fmt.Errorf("bind GPU %s to %s (is the vfio-pci module loaded?): %w", addr, DriverVFIO, err)
	}
	return verify(ctx, sys, addr, DriverVFIO)
}

// ToNVIDIA gives the GPU at addr back to the nvidia driver: driver_override
// is cleared, the device is unbound from vfio-pci and bound to nvidia. Like
// ToVFIO it converges from any intermediate state; a device already on
// nvidia only gets a stale override cleared. A device bound to any other
// driver is refused.
func ToNVIDIA(ctx context.Context, sys Sysfs, addr string) error {
	driver, err := sys.Driver(addr)
	if err != nil {
		return err
	}
	switch driver {
	case DriverNVIDIA, DriverVFIO, "":
	default:
		return fmt.Errorf("GPU %s is bound to driver %q, not %s or %s: not touching it", addr, driver, DriverVFIO, DriverNVIDIA)
	}
	if err := ensureOverride(sys, addr, ""); err != nil {
		return err
	}
	switch driver {
	case DriverNVIDIA:
		return nil
	case DriverVFIO:
		if err := sys.Unbind(addr, DriverVFIO); err != nil {
			return fmt.Errorf("unbind GPU %s from %s (is a virtual machine still using it?): %w", addr, DriverVFIO, err)
		}
	}
	if err := sys.Bind(addr, DriverNVIDIA); err != nil {
		return fmt.Errorf("bind GPU %s to %s: %w", addr, DriverNVIDIA, err)
	}
	return verify(ctx, sys, addr, DriverNVIDIA)
}

// ensureOverride writes driver_override unless it already says want.
func ensureOverride(sys Sysfs, addr, want string) error {
	got, err := sys.Override(addr)
	if err != nil {
		return err
	}
	if got == want {
		return nil
	}
	if err := sys.SetOverride(addr, want); err != nil {
		what := "set driver_override of GPU " + addr + " to " + want
		if want == "" {
			what = "clear driver_override of GPU " + addr
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// verifyTimeout bounds how long verify waits for the driver link to show
// the driver a bind asked for, and verifyInterval is how often it reads it.
var (
	verifyTimeout  = 2 * time.Second
	verifyInterval = 20 * time.Millisecond
)

// verify reads the driver back: a bind that the kernel accepted but that did
// not probe the device leaves it without one.
//
// It waits up to verifyTimeout for the link to show want. A real kernel
// probes the device inside the write to bind, so on a real node the first
// read normally answers. The wait is for a bind whose effect lands after
// the write returned: the local cluster's simulated kernel
// (test/fakedriver, KernelWatcher) acts on the write from another process,
// so the unbind and bind written just before may not have landed yet.
func verify(ctx context.Context, sys Sysfs, addr, want string) error {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	for {
		got, err := sys.Driver(addr)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("GPU %s: bound to %q after binding it to %s (waited %s for the bind to take effect)", addr, got, want, verifyTimeout)
		case <-time.After(verifyInterval):
		}
	}
}
