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
//     bind or unbind file: ENOENT;
//   - on a root with dev/iommu, vfio-pci's bind gives the device a VFIO
//     cdev and its unbind takes it away (cdev.go).
//
// Reads go through vfio.HostSysfs, the production reader, on the same tree.
//
// In-process tests call Kernel's vfio.Sysfs methods instead of writing the
// files. On the local cluster the plugin writes the files themselves
// (vfio.HostSysfs), and a KernelWatcher calls Apply after each write, which
// dispatches to the same methods: the rules above are written once.
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

// CDev implements vfio.Sysfs.
func (k *Kernel) CDev(addr string) (string, error) { return k.sys().CDev(addr) }

// SetOverride stores driver_override as the kernel shows it ("(null)" when
// unset). A file that already reads so is not written again, so that a
// watcher does not act on its own write (see Apply).
func (k *Kernel) SetOverride(addr, driver string) error {
	dir, err := k.devDir(addr)
	if err != nil {
		return err
	}
	v := strings.TrimSpace(driver)
	if v == "" || v == "(null)" {
		v = "(null)"
	}
	path := filepath.Join(dir, "driver_override")
	if cur, err := os.ReadFile(path); err == nil && string(cur) == v+"\n" {
		return nil
	}
	return os.WriteFile(path, []byte(v+"\n"), 0o644)
}

// Apply performs the kernel's effect of a completed write to the root's
// sysfs attribute at path (a driver's bind or unbind, a device's
// driver_override; path as the file was named to the writer, under
// sys/bus/pci/drivers/<driver>/ or the device's directory), with the value
// the file holds now. Like the kernel it then leaves bind and unbind
// reading back nothing, and driver_override as SetOverride shows it. A
// refusal is returned, but the writer got its write through already: this
// path proves only the success path (refusals stay covered by tests that
// call the methods directly). An empty bind or unbind (its own emptying)
// does nothing. It returns the value it acted on.
func (k *Kernel) Apply(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	value := strings.TrimSpace(string(b))
	dir, name := filepath.Split(path)
	dir = filepath.Clean(dir)
	switch name {
	case "driver_override":
		return value, k.SetOverride(filepath.Base(dir), value)
	case "bind", "unbind":
		if value == "" {
			return "", nil
		}
		// A write-only attribute: nothing to read back.
		if err := os.Truncate(path, 0); err != nil {
			return value, err
		}
		if name == "bind" {
			return value, k.Bind(value, filepath.Base(dir))
		}
		return value, k.Unbind(value, filepath.Base(dir))
	}
	return value, fmt.Errorf("%s: not a PCI sysfs attribute the simulated kernel acts on (bind, unbind, driver_override)", path)
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
	if driver == vfio.DriverVFIO {
		if err := k.removeCDev(dir); err != nil {
			return err
		}
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
	// The probe makes the cdev before the bind shows, as vfio-pci's does.
	if driver == vfio.DriverVFIO && k.iommufd() {
		if err := k.addCDev(dir); err != nil {
			return err
		}
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
