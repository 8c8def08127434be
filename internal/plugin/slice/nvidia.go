package slice

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// MemorySliceCapacity names the capacity NVIDIA's driver publishes for each
// memory slice i a MIG device occupies (value 1).
func MemorySliceCapacity(i int) resourceapi.QualifiedName {
	return resourceapi.QualifiedName("memorySlice" + strconv.Itoa(i))
}

// WithNVIDIAAttributes makes devices carry the attributes and capacities of
// NVIDIA's DRA driver under the same names and types, for the NVIDIA
// compatibility mode. gpudra's names already are NVIDIA's (type, uuid,
// productName, brand, architecture, cudaComputeCapability, driverVersion,
// cudaDriverVersion as versions, parentUUID, profile, memory and the MIG
// engine capacities, and the standard resource.kubernetes.io/pciBusID,
// which replaced NVIDIA's own pcieBusID); on top of them every MIG device
// gets a memorySlice<i> capacity per memory slice of its placement.
// MIG devices lose index and minor: they are their parent's numbers, which
// NVIDIA's driver does not publish for MIG devices. MIG devices lose
// gpuModuleID, and so do GPUs unless the node uses Fabric Manager's
// partitions (model.Node.FabricManager): NVIDIA's driver publishes it only
// with its alpha FabricManagerPartitioning gate, on GPUs and vfio devices,
// together with the partition<N> attributes.
func WithNVIDIAAttributes(node *model.Node, devices []resourceapi.Device) error {
	for i := range devices {
		d := &devices[i]
		if t := d.Attributes[AttrType].StringValue; !node.FabricManager || t == nil || *t != DeviceTypeGPU {
			delete(d.Attributes, AttrGPUModuleID)
		}
		if t := d.Attributes[AttrType].StringValue; t == nil || *t != DeviceTypeMIG {
			continue
		}
		delete(d.Attributes, AttrIndex)
		delete(d.Attributes, AttrMinor)
		start, size, err := placementOf(node, d)
		if err != nil {
			return err
		}
		for s := start; s < start+size; s++ {
			d.Capacity[MemorySliceCapacity(s)] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(1, resource.BinarySI)}
		}
		if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			return fmt.Errorf("MIG device %s has %d attributes and capacities with NVIDIA's names, the API allows %d",
				d.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
		}
	}
	return nil
}

// placementOf finds the memory slices of a MIG device: its placement start
// and the size of its profile's placements.
func placementOf(node *model.Node, d *resourceapi.Device) (int, int, error) {
	parent, profile, start := d.Attributes[AttrParentUUID].StringValue, d.Attributes[AttrProfile].StringValue, d.Attributes[AttrPlacementStart].IntValue
	if parent == nil || profile == nil || start == nil {
		return 0, 0, fmt.Errorf("MIG device %s lacks parentUUID, profile or placementStart", d.Name)
	}
	for i := range node.GPUs {
		g := &node.GPUs[i]
		if g.UUID != *parent {
			continue
		}
		for _, m := range g.MIGDevices {
			if m.Profile == *profile && int64(m.Start) == *start {
				return m.Start, m.Size, nil
			}
		}
		for _, p := range g.PublishedMIGProfiles() {
			if p.Name == *profile {
				return int(*start), p.PlacementSize, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("MIG device %s: no placement of profile %s at %d on GPU %s", d.Name, *profile, *start, *parent)
}
