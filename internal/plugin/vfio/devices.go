package vfio

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// ContainerPath of the VFIO container device (the legacy IOMMU API), which
// a VfioDeviceConfig's enableAPIDevice adds.
const ContainerPath = "/dev/vfio/vfio"

// GroupPath is the device node of IOMMU group n.
func GroupPath(n int) string { return path.Join("/dev/vfio", strconv.Itoa(n)) }

// DeviceNodes are the CDI device nodes for a passed-through GPU: its IOMMU
// group's node and, with apiDevice, the VFIO container node. Their numbers
// are read from the nodes under devRoot (vfio's major is dynamic); hostDev is
// the same root as the host sees it (for HostPath), "" or "/" for the host's
// own /dev.
func DeviceNodes(devRoot, hostDev string, group int, apiDevice bool) ([]*cdispec.DeviceNode, error) {
	paths := []string{GroupPath(group)}
	if apiDevice {
		paths = append(paths, ContainerPath)
	}
	var out []*cdispec.DeviceNode
	for _, p := range paths {
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
