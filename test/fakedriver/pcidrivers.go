package fakedriver

import (
	"fmt"
	"os"
	"path/filepath"
)

// IOMMUGroupBase is the IOMMU group of the root's first GPU; the others
// follow in discovery order. It is far from the GPU minors and indices, so
// that code confusing a group with either fails.
const IOMMUGroupBase = 40

// pciDrivers writes what PCI passthrough reads and writes in /sys and /dev:
// the nvidia and vfio-pci drivers (sys/bus/pci/drivers/<name>/{bind,unbind},
// write-only as in sysfs), each GPU bound to nvidia (<device>/driver and the
// driver's link back), an unset driver_override ("(null)"), an IOMMU group
// of its own (<device>/iommu_group -> sys/kernel/iommu_groups/<n>, which
// lists the device), and the VFIO device nodes dev/vfio/<n> and
// dev/vfio/vfio. The files are plain: Kernel performs the kernel's side
// of a write.
func (w *writer) pciDrivers(busIDs []string) {
	for _, d := range []string{"nvidia", "vfio-pci"} {
		for _, name := range []string{"bind", "unbind"} {
			w.file(filepath.Join("sys/bus/pci/drivers", d, name), nil, 0o200)
		}
	}
	w.charDevice("dev/vfio/vfio", VFIOMajor, VFIOContainerMinor, 0o666)
	for i, busID := range busIDs {
		if w.err != nil {
			return
		}
		group := IOMMUGroupBase + i
		dev := filepath.Join("sys/bus/pci/devices", busID)
		w.mkdir(dev)
		w.file(filepath.Join(dev, "driver_override"), []byte("(null)\n"), 0o644)
		groupDir := filepath.Join("sys/kernel/iommu_groups", fmt.Sprint(group))
		w.mkdir(filepath.Join(groupDir, "devices"))
		if w.err != nil {
			return
		}
		devDir, err := filepath.EvalSymlinks(w.path(dev))
		if err != nil {
			w.fail(err)
			return
		}
		rootDir, err := filepath.EvalSymlinks(w.root)
		if err != nil {
			w.fail(err)
			return
		}
		w.fail(relLink(devDir, filepath.Join(rootDir, groupDir), "iommu_group"))
		w.fail(relLink(filepath.Join(rootDir, groupDir, "devices"), devDir, busID))
		w.fail(linkDriver(devDir, filepath.Join(rootDir, "sys/bus/pci/drivers/nvidia"), busID))
		w.charDevice(filepath.Join("dev/vfio", fmt.Sprint(group)), VFIOMajor, group, 0o600)
	}
}

// PassthroughTree writes the passthrough part of a root (see pciDrivers)
// for GPUs at the given PCI addresses into root, for tests that need only
// it: a device without a directory under sys/bus/pci/devices gets a plain
// one. Like Generate it must run as root (device nodes).
func PassthroughTree(root string, busIDs []string) error {
	w := &writer{root: root}
	w.pciDrivers(busIDs)
	return w.err
}

// relLink makes dir/name a relative link to target.
func relLink(dir, target, name string) error {
	rel, err := filepath.Rel(dir, target)
	if err != nil {
		return err
	}
	return os.Symlink(rel, filepath.Join(dir, name))
}
