package slice

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// Forms of resource.kubernetes.io/numaNode (--numa-node-attribute).
const (
	// NUMAScalar publishes the GPU's NUMA node as an int: what every
	// Kubernetes version with DRA reads.
	NUMAScalar = "scalar"
	// NUMAList publishes a list: the GPU's NUMA node, then its socket's
	// other nodes at the smallest distance (model.GPU.NUMANeighbours).
	// matchAttribute then matches devices whose lists intersect, so GPUs on
	// two sub-NUMA clusters of one socket can be allocated together. Needs
	// the DRAListTypeAttributes feature gate (alpha in Kubernetes 1.36 and
	// 1.37) on the API server and the scheduler: without it the API server
	// drops the list and refuses the slice.
	NUMAList = "list"
)

// WithNUMAList turns the scalar numaNode attribute of every device (GPUs,
// and MIG devices, which carry their GPU's) into the list form.
func WithNUMAList(node *model.Node, devices []resourceapi.Device) {
	neighbours := map[int64][]int{}
	for _, g := range node.GPUs {
		if g.NUMANode != nil {
			neighbours[int64(*g.NUMANode)] = g.NUMANeighbours
		}
	}
	for i := range devices {
		attrs := devices[i].Attributes
		a, ok := attrs[deviceattribute.StandardDeviceAttributeNUMANode]
		if !ok || a.IntValue == nil {
			continue
		}
		list := []int64{*a.IntValue}
		for _, n := range neighbours[*a.IntValue] {
			list = append(list, int64(n))
		}
		attrs[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValues: list}
	}
}

// hasListAttribute reports whether a device has a list-valued attribute,
// which lowers the API's devices per slice to 64.
func hasListAttribute(d resourceapi.Device) bool {
	for _, a := range d.Attributes {
		if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
			return true
		}
	}
	return false
}
