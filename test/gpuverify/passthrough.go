package gpuverify

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/vfio"
)

// passthroughTitle is step 8's section title.
const passthroughTitle = "8. Passthrough readiness (read-only: what --passthrough would read)"

// passthrough is step 8: the sysfs files the vfio package reads before it
// rebinds a GPU, read through the same vfio.HostSysfs the plugin uses,
// without writing any of them. Each GPU must be on the nvidia driver and
// have a readable driver_override (the plugin's checks before a rebind);
// the IOMMU group, the vfio-pci driver and /dev/vfio/vfio are reported, not
// required: a node without them cannot pass GPUs through, which the plugin
// then says at prepare. Only a run on a driver root (Config.Roots) has
// them: a simulated NVML's GPUs are skipped.
func (k *kit) passthrough(node *model.Node) {
	s := k.r.section(passthroughTitle)
	if k.cfg.Roots == nil {
		// Not a driver root's NVML (ForDriverRoot sets Roots; the binary
		// always does): its GPUs are not on this machine's PCI bus.
		s.info("Skipped: NVML is not a driver root's (%s); its GPUs are not in this machine's sysfs", k.cfg.Library)
		return
	}
	sysRoot := k.cfg.SysfsRoot
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	devRoot := k.cfg.Roots.Dev // the root under which dev/vfio lives
	if devRoot == "" {
		devRoot = "/"
	}
	sys := vfio.HostSysfs{Root: sysRoot}
	for _, g := range node.GPUs {
		if g.PCIBusID == "" {
			s.fail("GPU %s: NVML gave no PCI bus ID; passthrough needs it", g.UUID)
			continue
		}
		driver, err := sys.Driver(g.PCIBusID)
		switch {
		case err != nil:
			s.fail("GPU %s (%s): driver link: %v", g.UUID, g.PCIBusID, err)
		case driver != vfio.DriverNVIDIA:
			s.fail("GPU %s (%s): bound to %q, not %q, while NVML lists it", g.UUID, g.PCIBusID, driver, vfio.DriverNVIDIA)
		default:
			s.pass("GPU %s (%s): bound to %s", g.UUID, g.PCIBusID, driver)
		}
		if override, err := sys.Override(g.PCIBusID); err != nil {
			s.fail("GPU %s (%s): driver_override: %v", g.UUID, g.PCIBusID, err)
		} else {
			s.pass("GPU %s (%s): driver_override readable: %q (empty: unset)", g.UUID, g.PCIBusID, override)
		}
		if group, err := sys.IOMMUGroup(g.PCIBusID); err != nil {
			s.info("GPU %s (%s): %v", g.UUID, g.PCIBusID, err)
		} else {
			s.info("GPU %s (%s): IOMMU group %d; %s", g.UUID, g.PCIBusID, group, exists(filepath.Join(devRoot, vfio.GroupPath(group))))
		}
	}
	s.info("vfio-pci driver in sysfs: %s", exists(sys.DriverDir(vfio.DriverVFIO)))
	s.info("VFIO container device: %s", exists(filepath.Join(devRoot, vfio.ContainerPath)))
}

// exists says whether path exists, for the report.
func exists(path string) string {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return path + " exists"
	case errors.Is(err, fs.ErrNotExist):
		return path + " absent"
	default:
		return path + ": " + err.Error()
	}
}
