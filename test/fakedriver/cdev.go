package fakedriver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
)

// iommufd on a fake driver root: a profile with iommufd (sim.Profile.IOMMUFD)
// gives the root dev/iommu (vfio.IOMMUPath), and its simulated kernel then
// gives each GPU that vfio-pci binds a VFIO cdev, as a kernel with
// CONFIG_IOMMUFD and CONFIG_VFIO_DEVICE_CDEV does: the directory
// <device>/vfio-dev/vfio<N> in sysfs (with its dev file, "major:minor") and
// the node dev/vfio/devices/vfio<N>, both gone when vfio-pci lets the device
// go. The kernel's numbers are the least kind a test can meet: allocated
// at bind, the lowest free from CDevBase, so that N depends on the order
// of binds and is neither the GPU's IOMMU group (IOMMUGroupBase on) nor its
// minor or index.
const (
	// IOMMUFDProfilePath is the local cluster's profile of a node with
	// iommufd (two L4s), in the repository.
	IOMMUFDProfilePath = "test/localcluster/profiles/l4-iommufd.yaml"
	// IOMMUMinor is dev/iommu's minor on VFIOMajor (real kernels: misc 10,
	// a dynamic minor).
	IOMMUMinor = 254
	// CDevMajor is the major of dev/vfio/devices/vfio<N> (minor N), vfio-dev
	// (real kernels: a dynamic major).
	CDevMajor = 125
	// CDevBase is the number of the first cdev.
	CDevBase = 100
)

// iommufd gives the root dev/iommu when the profile's kernel offers iommufd.
func (w *writer) iommufd(on bool) {
	if on {
		w.charDevice(strings.TrimPrefix(vfio.IOMMUPath, "/"), VFIOMajor, IOMMUMinor, 0o666)
	}
}

// EnableIOMMUFD gives an existing root dev/iommu, as a profile with iommufd
// does, for tests that build a root by hand (PassthroughTree). Like
// Generate it must run as root.
func EnableIOMMUFD(root string) error {
	w := &writer{root: root}
	w.iommufd(true)
	return w.err
}

// iommufd reports whether the root's kernel offers iommufd: dev/iommu,
// where the plugin looks for it too.
func (k *Kernel) iommufd() bool {
	_, err := os.Stat(filepath.Join(k.Root, vfio.IOMMUPath))
	return err == nil
}

func (k *Kernel) cdevNode(name string) string { return filepath.Join(k.Root, vfio.CDevPath(name)) }

// addCDev gives the device at devDir a cdev, unless it has one (a bind
// after a crash half-way through this).
func (k *Kernel) addCDev(devDir string) error {
	if name, err := k.sys().CDev(filepath.Base(devDir)); err != nil || name != "" {
		return err
	}
	n, err := k.freeCDev()
	if err != nil {
		return err
	}
	name := "vfio" + strconv.Itoa(n)
	dir := filepath.Join(devDir, vfio.CDevSysfsDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "dev"), fmt.Appendf(nil, "%d:%d\n", CDevMajor, n), 0o444); err != nil {
		return err
	}
	node := k.cdevNode(name)
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		return err
	}
	if err := syscall.Mknod(node, syscall.S_IFCHR|0o600, Mkdev(CDevMajor, n)); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: mknod %s: %w", ErrNeedRoot, node, err)
	}
	return nil
}

// freeCDev is the lowest cdev number from CDevBase that no node in
// dev/vfio/devices has.
func (k *Kernel) freeCDev() (int, error) {
	entries, err := os.ReadDir(filepath.Join(k.Root, vfio.CDevDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	used := map[int]bool{}
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "vfio")); err == nil {
			used[n] = true
		}
	}
	n := CDevBase
	for used[n] {
		n++
	}
	return n, nil
}

// removeCDev takes the device's cdev away: its node and its sysfs entry.
func (k *Kernel) removeCDev(devDir string) error {
	entries, err := os.ReadDir(filepath.Join(devDir, vfio.CDevSysfsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Remove(k.cdevNode(e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return os.RemoveAll(filepath.Join(devDir, vfio.CDevSysfsDir))
}
