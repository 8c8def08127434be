// Package vfio moves a GPU between the nvidia driver and vfio-pci for
// passthrough to a virtual machine (the vfio device type), through the
// kernel's PCI sysfs: driver_override, the drivers' unbind and bind files,
// and the device's IOMMU group. It also says which /dev/vfio nodes a
// container needs and what device metadata (KEP-5304) the kubelet gets.
//
// The package reaches the kernel only through Sysfs. HostSysfs writes the real
// files; a simulated driver root supplies an implementation that performs the
// kernel's effect on its plain files (test/fakedriver's Kernel).
package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The drivers a passthrough GPU moves between.
const (
	DriverNVIDIA = "nvidia"
	DriverVFIO   = "vfio-pci"
)

// Sysfs is the part of the kernel's PCI sysfs that rebinding a GPU needs.
// Addresses are sysfs bus IDs such as "0000:1b:00.0".
type Sysfs interface {
	// Driver names the driver bound to the device; "" when none is.
	Driver(addr string) (string, error)
	// Override reads the device's driver_override; "" when it is unset.
	Override(addr string) (string, error)
	// IOMMUGroup is the number of the device's IOMMU group.
	IOMMUGroup(addr string) (int, error)
	// CDev names the device's VFIO cdev ("vfio<N>": /dev/vfio/devices/vfio<N>,
	// the iommufd backend's node), which the kernel lists under the device's
	// CDevSysfsDir while vfio-pci has it on a kernel with iommufd; "" when
	// there is none.
	CDev(addr string) (string, error)
	// SetOverride writes driver_override; "" clears it.
	SetOverride(addr, driver string) error
	// Unbind writes the address to drivers/<driver>/unbind.
	Unbind(addr, driver string) error
	// Bind writes the address to drivers/<driver>/bind.
	Bind(addr, driver string) error
}

// HostSysfs is the kernel's sysfs mounted at Root (normally /sys; the
// driver root's sys/ on a containerized or simulated driver, as
// nvmllib.Roots.Sys resolves it).
type HostSysfs struct {
	Root string
}

var _ Sysfs = HostSysfs{}

func (h HostSysfs) device(addr string, name ...string) string {
	return filepath.Join(append([]string{h.Root, "bus", "pci", "devices", addr}, name...)...)
}

// DriverDir is a PCI driver's directory; it exists while the driver is
// loaded.
func (h HostSysfs) DriverDir(driver string) string {
	return filepath.Join(h.Root, "bus", "pci", "drivers", driver)
}

func (h HostSysfs) driverFile(driver, name string) string {
	return filepath.Join(h.DriverDir(driver), name)
}

// Driver reads the device's driver link.
func (h HostSysfs) Driver(addr string) (string, error) {
	if _, err := os.Stat(h.device(addr)); err != nil {
		return "", fmt.Errorf("PCI device %s: %w", addr, err)
	}
	target, err := os.Readlink(h.device(addr, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("PCI device %s: %w", addr, err)
	}
	return filepath.Base(target), nil
}

// Override reads driver_override; the kernel shows an unset one as "(null)".
func (h HostSysfs) Override(addr string) (string, error) {
	b, err := os.ReadFile(h.device(addr, "driver_override"))
	if err != nil {
		return "", fmt.Errorf("PCI device %s: %w", addr, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "(null)" {
		v = ""
	}
	return v, nil
}

// IOMMUGroup reads the device's iommu_group link, whose last element is the
// group's number. A device without one means the IOMMU is off.
func (h HostSysfs) IOMMUGroup(addr string) (int, error) {
	target, err := os.Readlink(h.device(addr, "iommu_group"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("PCI device %s has no IOMMU group: is the IOMMU enabled (intel_iommu=on / amd_iommu=on)?", addr)
	}
	if err != nil {
		return 0, fmt.Errorf("PCI device %s: %w", addr, err)
	}
	n, err := strconv.Atoi(filepath.Base(target))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("PCI device %s: IOMMU group link %q does not end in a group number", addr, target)
	}
	return n, nil
}

// CDevSysfsDir is the directory of a PCI device's sysfs entry in which
// the kernel lists the device's VFIO cdev, vfio-dev/vfio<N>.
const CDevSysfsDir = "vfio-dev"

// CDev reads the name of the device's VFIO cdev from its vfio-dev
// directory; "" when the directory is missing or lists none.
func (h HostSysfs) CDev(addr string) (string, error) {
	entries, err := os.ReadDir(h.device(addr, CDevSysfsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("PCI device %s: %w", addr, err)
	}
	for _, e := range entries {
		if name := e.Name(); e.IsDir() && strings.HasPrefix(name, "vfio") {
			if _, err := strconv.Atoi(strings.TrimPrefix(name, "vfio")); err == nil {
				return name, nil
			}
		}
	}
	return "", nil
}

// SetOverride writes driver_override; a newline alone clears it.
func (h HostSysfs) SetOverride(addr, driver string) error {
	return write(h.device(addr, "driver_override"), driver+"\n")
}

// Unbind writes the address to the driver's unbind file.
func (h HostSysfs) Unbind(addr, driver string) error {
	return write(h.driverFile(driver, "unbind"), addr)
}

// Bind writes the address to the driver's bind file.
func (h HostSysfs) Bind(addr, driver string) error {
	return write(h.driverFile(driver, "bind"), addr)
}

// write writes a sysfs attribute in one write call, as the kernel expects;
// it never creates the file.
func write(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", strings.TrimSpace(value), path, werr)
	}
	return cerr
}
