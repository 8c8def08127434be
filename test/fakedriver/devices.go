package fakedriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Major numbers of the root's device nodes. They come from the Linux
// "LOCAL/EXPERIMENTAL USE" range (120-127), which the kernel never assigns,
// so opening a node fails with ENXIO. Real GPUs use 195 (nvidia-frontend)
// and dynamic majors; a fake node must never reach a real device.
const (
	// FrontendMajor: dev/nvidia<minor>, dev/nvidiactl, dev/nvidia-modeset.
	FrontendMajor = 120
	// UVMMajor: dev/nvidia-uvm (minor 0), dev/nvidia-uvm-tools (minor 1).
	UVMMajor = 121
	// CapsMajor: dev/nvidia-caps/nvidia-cap<N>, N from mig-minors.
	CapsMajor = 122
	// IMEXChannelsMajor: nvidia-caps-imex-channels in proc/devices, the
	// major of dev/nvidia-caps-imex-channels/channel<N>. The root has no
	// such nodes: on a real host they do not exist until someone creates
	// them; the least kind assumption is that nobody has.
	IMEXChannelsMajor = 123
	// VFIOMajor: dev/vfio/<group> (minor: the IOMMU group, as numbered in
	// sys/kernel/iommu_groups) and dev/vfio/vfio (minor VFIOContainerMinor).
	// Real kernels give vfio a dynamic major and the container node misc
	// 10:196; here both share one local major.
	VFIOMajor          = 124
	VFIOContainerMinor = 255

	// FabricIMEXMgmtMinor is the nvidia-caps minor of the driver's
	// fabric-imex-mgmt capability (proc/driver/nvidia/capabilities/
	// fabric-imex-mgmt, dev/nvidia-caps/nvidia-cap<minor>), which roots
	// of nodes whose GPUs are in an NVLink clique have. The real driver
	// numbers it itself; this one lies above the MIG numbers of up to 29
	// GPUs (3 + 29*135), so that it names no MIG capability.
	FabricIMEXMgmtMinor = 4000

	CtlMinor     = 255
	ModesetMinor = 254
)

// The driver's MIG capability numbering (proc/driver/nvidia-caps/mig-minors):
// config 1, monitor 2, then per GPU minor 15 GPU instances, each followed by
// its 8 compute instances.
const (
	migGPUInstances     = 15
	migComputeInstances = 8
	migMinorsPerGPU     = migGPUInstances * (1 + migComputeInstances)
)

// MIGCap is one line of mig-minors: a capability and its device minor.
type MIGCap struct {
	Name  string // "config", "gpu0/gi3/access", "gpu0/gi3/ci0/access"
	Minor int
}

// MIGCaps returns the mig-minors lines of GPUs with the given minor
// numbers: config and monitor, then each GPU's capabilities in minor order.
func MIGCaps(gpuMinors []int) []MIGCap {
	caps := []MIGCap{{"config", 1}, {"monitor", 2}}
	minors := slices.Sorted(slices.Values(gpuMinors))
	for _, m := range minors {
		for gi := range migGPUInstances {
			base := 3 + m*migMinorsPerGPU + gi*(1+migComputeInstances)
			caps = append(caps, MIGCap{fmt.Sprintf("gpu%d/gi%d/access", m, gi), base})
			for ci := range migComputeInstances {
				caps = append(caps, MIGCap{fmt.Sprintf("gpu%d/gi%d/ci%d/access", m, gi, ci), base + 1 + ci})
			}
		}
	}
	return caps
}

// deviceNodes creates dev/: one node per GPU, the control nodes, and the
// MIG capability nodes of MIG-capable GPUs (mig-minors lists every GPU, as
// the driver's does).
func (w *writer) deviceNodes(f *nodeFacts) {
	for _, g := range f.GPUs {
		w.charDevice(fmt.Sprintf("dev/nvidia%d", g.Minor), FrontendMajor, g.Minor, 0o666)
	}
	w.charDevice("dev/nvidiactl", FrontendMajor, CtlMinor, 0o666)
	w.charDevice("dev/nvidia-modeset", FrontendMajor, ModesetMinor, 0o666)
	w.charDevice("dev/nvidia-uvm", UVMMajor, 0, 0o666)
	w.charDevice("dev/nvidia-uvm-tools", UVMMajor, 1, 0o666)

	var all, migCapable []int
	for _, g := range f.GPUs {
		all = append(all, g.Minor)
		if g.MIGCapable {
			migCapable = append(migCapable, g.Minor)
		}
	}
	var table strings.Builder
	for _, c := range MIGCaps(all) {
		fmt.Fprintf(&table, "%s %d\n", c.Name, c.Minor)
	}
	w.file("proc/driver/nvidia-caps/mig-minors", []byte(table.String()), 0o444)
	for _, c := range MIGCaps(migCapable) {
		mode := os.FileMode(0o444)
		if c.Name == "config" {
			mode = 0o400
		}
		w.charDevice(fmt.Sprintf("dev/nvidia-caps/nvidia-cap%d", c.Minor), CapsMajor, c.Minor, mode)
	}
	// The driver's capability files for config and monitor.
	w.file("proc/driver/nvidia/capabilities/mig/config", capFile(1, 0o400), 0o444)
	w.file("proc/driver/nvidia/capabilities/mig/monitor", capFile(2, 0o444), 0o444)
	w.file("proc/devices", procDevices(), 0o444)
	w.fabricIMEXMgmt(f)
}

// fabricIMEXMgmt gives a node whose GPUs are in a multi-node NVLink fabric
// the driver's IMEX fabric management capability, as a driver with IMEX
// support has it: the capability file whose DeviceFileMinor names the
// node, and the node (mode 0400, root only, like the MIG config
// capability). The IMEX daemon opens it; a node without such a fabric has
// none (computedomain.ReadFabricMgmt then says so). A node whose fabric
// registration has not completed has it too: the capability is the
// driver's, there before the Fabric Manager registered the GPUs.
func (w *writer) fabricIMEXMgmt(f *nodeFacts) {
	if !slices.ContainsFunc(f.GPUs, func(g gpuFacts) bool { return g.RackFabric }) {
		return
	}
	w.file("proc/driver/nvidia/capabilities/fabric-imex-mgmt", capFile(FabricIMEXMgmtMinor, 0o400), 0o444)
	w.charDevice(fmt.Sprintf("dev/nvidia-caps/nvidia-cap%d", FabricIMEXMgmtMinor), CapsMajor, FabricIMEXMgmtMinor, 0o400)
}

// procDevices is the root's proc/devices: the driver's character devices.
func procDevices() []byte {
	return fmt.Appendf(nil, "Character devices:\n%3d nvidia-frontend\n%3d nvidia-uvm\n%3d nvidia-caps\n%3d nvidia-caps-imex-channels\n%3d vfio\n\nBlock devices:\n",
		FrontendMajor, UVMMajor, CapsMajor, IMEXChannelsMajor, VFIOMajor)
}

func capFile(minor int, mode os.FileMode) []byte {
	return fmt.Appendf(nil, "DeviceFileMinor: %d\nDeviceFileMode: %d\nDeviceFileModify: 1\n", minor, mode)
}

// ErrNeedRoot is returned (wrapped) when device nodes cannot be created.
var ErrNeedRoot = errors.New("creating device nodes needs root (CAP_MKNOD)")

func (w *writer) charDevice(rel string, major, minor int, mode os.FileMode) {
	w.mkdir(filepath.Dir(rel))
	if w.err != nil {
		return
	}
	path := w.path(rel)
	err := syscall.Mknod(path, syscall.S_IFCHR|uint32(mode.Perm()), Mkdev(major, minor))
	if errors.Is(err, syscall.EPERM) {
		w.fail(fmt.Errorf("%w: mknod %s: run the generator as root", ErrNeedRoot, path))
		return
	}
	if err == nil {
		err = os.Chmod(path, mode) // mknod's mode is cut by the umask
	}
	w.fail(err)
}

// Mkdev encodes a device number the way Linux does (glibc's makedev).
func Mkdev(major, minor int) int {
	ma, mi := uint64(major), uint64(minor)
	return int(ma&0xfff<<8 | ma&^0xfff<<32 | mi&0xff | mi&^0xff<<12)
}

// Major and Minor decode a device number (stat's st_rdev).
func Major(dev uint64) int { return int(dev>>8&0xfff | dev>>32&0xfffff000) }

// Minor decodes the minor number of a device number.
func Minor(dev uint64) int { return int(dev&0xff | dev>>12&0xffffff00) }
