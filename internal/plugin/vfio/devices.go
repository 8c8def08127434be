package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Device nodes of the two IOMMU backends, as a container sees them.
const (
	// ContainerPath of the VFIO container device (the legacy IOMMU API), which
	// a VfioDeviceConfig's enableAPIDevice adds with the legacy backend.
	ContainerPath = "/dev/vfio/vfio"
	// IOMMUPath is the iommufd API device. Its presence on a node means the
	// kernel offers iommufd (IOMMUFDEnabled), and enableAPIDevice adds it
	// instead of ContainerPath with the iommufd backend.
	IOMMUPath = "/dev/iommu"
	// CDevDir holds the per-device VFIO nodes of the iommufd backend,
	// /dev/vfio/devices/vfio<N>.
	CDevDir = "/dev/vfio/devices"
)

// GroupPath is the device node of IOMMU group n.
func GroupPath(n int) string { return path.Join("/dev/vfio", strconv.Itoa(n)) }

// CDevPath is the device node of a VFIO device cdev named as sysfs lists it
// (Sysfs.CDev), e.g. "vfio3".
func CDevPath(name string) string { return path.Join(CDevDir, name) }

// IOMMUFDEnabled reports whether the node offers iommufd: devRoot (the root
// under which the plugin finds /dev/vfio, nvmllib.Roots.Dev) has
// /dev/iommu. NVIDIA's driver decides the same way.
func IOMMUFDEnabled(devRoot string) (bool, error) {
	p := filepath.Join(devRoot, IOMMUPath)
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("cannot tell whether the node offers iommufd: %w", err)
	}
}

// Nodes says which VFIO device nodes a passed-through GPU gets.
type Nodes struct {
	// Group is the GPU's IOMMU group: /dev/vfio/<Group> with the legacy
	// backend.
	Group int
	// CDev, when set, selects the iommufd backend: the GPU's cdev
	// /dev/vfio/devices/<CDev> instead of its group's node.
	CDev string
	// APIDevice adds the backend's API device: /dev/iommu with iommufd,
	// /dev/vfio/vfio with the legacy backend.
	APIDevice bool
}

// Paths are the nodes' paths in the container.
func (n Nodes) Paths() []string {
	if n.CDev != "" {
		out := []string{CDevPath(n.CDev)}
		if n.APIDevice {
			out = append(out, IOMMUPath)
		}
		return out
	}
	out := []string{GroupPath(n.Group)}
	if n.APIDevice {
		out = append(out, ContainerPath)
	}
	return out
}

// DeviceNodes are the CDI device nodes for a passed-through GPU (see Nodes).
// Their numbers are read from the nodes under devRoot (vfio's majors are
// dynamic); hostDev is the same root as the host sees it (for HostPath), ""
// or "/" for the host's own /dev.
func DeviceNodes(devRoot, hostDev string, n Nodes) ([]*cdispec.DeviceNode, error) {
	var out []*cdispec.DeviceNode
	for _, p := range n.Paths() {
		var st syscall.Stat_t
		here := filepath.Join(devRoot, p)
		if err := syscall.Stat(here, &st); err != nil {
			return nil, fmt.Errorf("VFIO device node %s: %w", here, err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			return nil, fmt.Errorf("VFIO device node %s is not a character device", here)
		}
		mode := os.FileMode(0o666)
		node := &cdispec.DeviceNode{Path: p, Type: "c", Major: int64(major(st.Rdev)), Minor: int64(minor(st.Rdev)), FileMode: &mode}
		if hostDev != "" && hostDev != "/" {
			node.HostPath = filepath.Join(hostDev, p)
		}
		out = append(out, node)
	}
	return out, nil
}

func major(dev uint64) uint64 { return dev>>8&0xfff | dev>>32&0xfffff000 }
func minor(dev uint64) uint64 { return dev&0xff | dev>>12&0xffffff00 }

// PCIBusIDAttribute is the standard attribute KubeVirt reads from a
// device's metadata to find the PCI device to give its virtual machine.
const PCIBusIDAttribute = "resource.kubernetes.io/pciBusID"

// Metadata is the device metadata (KEP-5304) of a passed-through GPU: the
// standard pciBusID, which KubeVirt reads, and, in the driver's domain, the
// type, the IOMMU group and the GPU's UUID and product name as discovered
// before it left the nvidia driver. Attributes with empty values are left out.
func Metadata(addr string, group int, deviceType, uuid, productName string) *kubeletplugin.DeviceMetadata {
	attrs := map[string]resourceapi.DeviceAttribute{
		PCIBusIDAttribute: {StringValue: &addr},
		"iommuGroup":      {IntValue: ptr(int64(group))},
	}
	for k, v := range map[string]string{"type": deviceType, "uuid": uuid, "productName": productName} {
		if v != "" {
			attrs[k] = resourceapi.DeviceAttribute{StringValue: &v}
		}
	}
	return &kubeletplugin.DeviceMetadata{Attributes: attrs}
}

func ptr[T any](v T) *T { return &v }

// ErrNoCDev: a GPU to be given through the iommufd backend has no VFIO
// device cdev.
var ErrNoCDev = errors.New("no VFIO device cdev")

// NodesFor says which nodes the GPU at addr, in IOMMU group group and bound
// to vfio-pci, gets: with iommufd (the claim prefers it and the node offers
// it) its cdev, read from sysfs now, since the kernel numbers cdevs when
// vfio-pci binds the device; otherwise its group's node.
func NodesFor(sys Sysfs, addr string, group int, iommufd, apiDevice bool) (Nodes, error) {
	n := Nodes{Group: group, APIDevice: apiDevice}
	if !iommufd {
		return n, nil
	}
	cdev, err := sys.CDev(addr)
	if err != nil {
		return Nodes{}, fmt.Errorf("GPU %s: VFIO device cdev: %w", addr, err)
	}
	if cdev == "" {
		return Nodes{}, fmt.Errorf("GPU %s is on %s, but its sysfs directory lists no %s/vfio<N> (%w, %s/vfio<N>) for the iommufd "+
			"backend the claim prefers (backendPolicy %s) on this node with %s: the kernel needs CONFIG_VFIO_DEVICE_CDEV; "+
			"or ask for backendPolicy LegacyOnly", addr, DriverVFIO, CDevSysfsDir, ErrNoCDev, CDevDir, "PreferIommuFD", IOMMUPath)
	}
	n.CDev = cdev
	return n, nil
}
