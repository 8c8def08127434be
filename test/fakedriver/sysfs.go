package fakedriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
)

// Kernel is the kernel's side of a fake driver root's PCI sysfs. The root's
// driver_override, bind and unbind are plain files, which do nothing when
// written; Kernel implements vfio.Sysfs on the root so that the plugin's
// real rebinding code runs, and performs what Linux does for each write,
// refusing what Linux refuses:
//
//   - bind fails with EBUSY while the device has a driver, with ENODEV when
//     driver_override names another driver, and with ENODEV for vfio-pci
//     without an override naming it (vfio-pci matches no device by ID unless
//     told to; nvidia matches NVIDIA GPUs by its ID table);
//   - unbind fails with ENODEV unless the device is bound to that driver,
//     and unbinding a GPU from nvidia fails with EBUSY while Busy reports a
//     process using it (the real driver waits for its clients or hangs: the
//     least kind outcome a test can observe is a refusal);
//   - a driver that is not loaded (no sys/bus/pci/drivers/<name>) has no
//     bind or unbind file: ENOENT.
//
// Reads go through vfio.HostSysfs, the production reader, on the same tree.
type Kernel struct {
	// Root is the fake driver root.
	Root string
	// Busy reports whether a process uses the GPU at the address; nil for
	// never.
	Busy func(addr string) bool
}

var _ vfio.Sysfs = (*Kernel)(nil)

func (k *Kernel) sys() vfio.HostSysfs { return vfio.HostSysfs{Root: filepath.Join(k.Root, "sys")} }

func (k *Kernel) devDir(addr string) (string, error) {
	dir, err := filepath.EvalSymlinks(filepath.Join(k.Root, "sys/bus/pci/devices", addr))
	if err != nil {
		return "", &os.PathError{Op: "open", Path: addr, Err: syscall.ENODEV}
	}
	return dir, nil
}

func (k *Kernel) driverDir(driver string) (string, error) {
	dir := filepath.Join(k.Root, "sys/bus/pci/drivers", driver)
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: filepath.Join(dir, "bind"), Err: syscall.ENOENT}
	}
	return resolved, nil
}

// Driver implements vfio.Sysfs.
func (k *Kernel) Driver(addr string) (string, error) { return k.sys().Driver(addr) }

// Override implements vfio.Sysfs.
func (k *Kernel) Override(addr string) (string, error) { return k.sys().Override(addr) }

// IOMMUGroup implements vfio.Sysfs.
func (k *Kernel) IOMMUGroup(addr string) (int, error) { return k.sys().IOMMUGroup(addr) }

// SetOverride stores driver_override as the kernel shows it.
func (k *Kernel) SetOverride(addr, driver string) error {
	dir, err := k.devDir(addr)
	if err != nil {
		return err
	}
	v := strings.TrimSpace(driver)
	if v == "" {
		v = "(null)"
	}
	return os.WriteFile(filepath.Join(dir, "driver_override"), []byte(v+"\n"), 0o644)
}

// Unbind detaches the device from driver.
func (k *Kernel) Unbind(addr, driver string) error {
	dir, err := k.devDir(addr)
	if err != nil {
		return err
	}
	drvDir, err := k.driverDir(driver)
	if err != nil {
		return err
	}
	unbind := filepath.Join(drvDir, "unbind")
	if cur, err := k.Driver(addr); err != nil {
		return err
	} else if cur != driver {
		return &os.PathError{Op: "write", Path: unbind, Err: syscall.ENODEV}
	}
	if driver == vfio.DriverNVIDIA && k.Busy != nil && k.Busy(addr) {
		return &os.PathError{Op: "write", Path: unbind, Err: syscall.EBUSY}
	}
	if err := os.Remove(filepath.Join(drvDir, addr)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Remove(filepath.Join(dir, "driver"))
}

// Bind attaches the device to driver.
func (k *Kernel) Bind(addr, driver string) error {
	dir, err := k.devDir(addr)
	if err != nil {
		return err
	}
	drvDir, err := k.driverDir(driver)
	if err != nil {
		return err
	}
	bind := filepath.Join(drvDir, "bind")
	cur, err := k.Driver(addr)
	if err != nil {
		return err
	}
	if cur != "" {
		return &os.PathError{Op: "write", Path: bind, Err: syscall.EBUSY}
	}
	override, err := k.Override(addr)
	if err != nil {
		return err
	}
	if (override != "" && override != driver) || (override == "" && driver != vfio.DriverNVIDIA) {
		return &os.PathError{Op: "write", Path: bind, Err: syscall.ENODEV}
	}
	return linkDriver(dir, drvDir, addr)
}

// linkDriver makes the two links the kernel shows for a bound device:
// <device>/driver -> the driver's directory, and <driver>/<addr> -> the
// device, both relative as in sysfs.
func linkDriver(devDir, drvDir, addr string) error {
	rel, err := filepath.Rel(devDir, drvDir)
	if err != nil {
		return err
	}
	if err := os.Symlink(rel, filepath.Join(devDir, "driver")); err != nil {
		return err
	}
	back, err := filepath.Rel(drvDir, devDir)
	if err != nil {
		return err
	}
	if err := os.Symlink(back, filepath.Join(drvDir, addr)); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// Errno is the error number of a Kernel refusal, for tests.
func Errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// String names the kernel for log lines.
func (k *Kernel) String() string { return fmt.Sprintf("simulated kernel of %s", k.Root) }
