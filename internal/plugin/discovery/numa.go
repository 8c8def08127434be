package discovery

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"
)

// NUMANodeResolver is implemented by backends that know the NUMA node of a
// GPU's PCI device without sysfs (the simulated backend does, see
// test/sim's Server.PCINUMANode). On real nodes it is read from sysfs.
type NUMANodeResolver interface {
	PCINUMANode(pciBusID string) (int, bool)
}

// numaNode is the NUMA node of the GPU's PCI device, as the kernel reports
// it in <sysfs>/bus/pci/devices/<bus ID>/numa_node; nil when the kernel
// knows none (-1: the firmware publishes no PCIe affinity), the file is
// absent or unreadable. NVIDIA's DRA driver reads the same file.
//
// nvmlDeviceGetNumaNodeId is not asked: nvml.h says it "only applies to
// platforms where the GPUs are NUMA nodes", so on x86 servers it answers
// NOT_SUPPORTED, and on Grace systems it names the NUMA node of the GPU's
// own memory, not the CPU node the device is attached to, which is what
// resource.kubernetes.io/numaNode aligns with (CPUs, other devices).
func numaNode(ctx context.Context, busID string, resolver NUMANodeResolver, opts Options) *int {
	logger := klog.FromContext(ctx)
	if resolver != nil {
		n, ok := resolver.PCINUMANode(busID)
		if !ok || n < 0 {
			return nil
		}
		return &n
	}
	root := opts.SysfsRoot
	if root == "" {
		root = "/sys"
	}
	file := filepath.Join(root, "bus", "pci", "devices", busID, "numa_node")
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			logger.V(2).Info("NUMA node unknown, not publishing numaNode", "pciBusID", busID, "file", file)
		} else {
			logger.Error(err, "Cannot read the GPU's NUMA node, not publishing numaNode", "pciBusID", busID)
		}
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		logger.Error(err, "Malformed NUMA node in sysfs, not publishing numaNode", "pciBusID", busID, "file", file)
		return nil
	}
	if n < 0 {
		logger.V(2).Info("The kernel knows no NUMA node for the GPU, not publishing numaNode", "pciBusID", busID)
		return nil
	}
	return &n
}

// numaNeighbours are the NUMA nodes that k8s.io/dynamic-resource-allocation's
// list form of numaNode adds to node: those of its socket at the smallest
// SLIT distance (<sysfs>/devices/system/node). None where sysfs has no
// distances or the socket holds one node.
func numaNeighbours(ctx context.Context, node int, opts Options) []int {
	root := opts.SysfsRoot
	if root == "" {
		root = "/sys"
	}
	attr, err := deviceattribute.GetNUMANodeAttribute(node, deviceattribute.ListAttribute, deviceattribute.WithFSFromRoot(root))
	if err != nil {
		klog.FromContext(ctx).V(2).Info("No NUMA neighbours", "numaNode", node, "err", err)
		return nil
	}
	var out []int
	for _, n := range attr.Value.IntValues {
		if int(n) != node {
			out = append(out, int(n))
		}
	}
	return out
}
