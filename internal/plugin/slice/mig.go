package slice

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// MIG attribute and capacity names (NVIDIA's driver uses the same).
const (
	AttrParentUUID     resourceapi.QualifiedName = "parentUUID"
	AttrProfile        resourceapi.QualifiedName = "profile"
	AttrPlacementStart resourceapi.QualifiedName = "placementStart"

	CapacityMultiprocessors resourceapi.QualifiedName = "multiprocessors"
	CapacityCopyEngines     resourceapi.QualifiedName = "copyEngines"
	CapacityDecoders        resourceapi.QualifiedName = "decoders"
	CapacityEncoders        resourceapi.QualifiedName = "encoders"
	CapacityJPEGEngines     resourceapi.QualifiedName = "jpegEngines"
	CapacityOFAEngines      resourceapi.QualifiedName = "ofaEngines"

	// DeviceTypeMIG is the value of the type attribute for MIG devices.
	DeviceTypeMIG = "mig"
)

// Counter names of a dynamically partitioned GPU's counter set. Each memory
// slice is its own counter of 1, so two placements that overlap can never
// both be allocated; the compute slices and engines are totals.
const (
	counterComputeSlices = "compute-slices"
	counterCopyEngines   = "copy-engines"
	counterDecoders      = "decoders"
	counterEncoders      = "encoders"
	counterJPEGEngines   = "jpeg-engines"
	counterOFAEngines    = "ofa-engines"
)

// MemorySliceCounter names the counter of memory slice i.
func MemorySliceCounter(i int) string { return "memory-slice-" + strconv.Itoa(i) }

// counterSets lists one counter set per dynamically partitioned GPU.
func counterSets(node *model.Node) []resourceapi.CounterSet {
	var out []resourceapi.CounterSet
	for i := range node.GPUs {
		g := &node.GPUs[i]
		if g.Partitioning != model.DynamicMIG {
			continue
		}
		out = append(out, resourceapi.CounterSet{Name: g.CounterSetName(), Counters: wholeCounters(g.MIG)})
	}
	return out
}

// wholeCounters is everything a GPU has: its counter set, and what its
// whole-GPU device consumes.
func wholeCounters(geo *model.MIGGeometry) map[string]resourceapi.Counter {
	c := engineCounters(geo.ComputeSlices, geo.Totals)
	for i := 0; i < geo.MemorySlices; i++ {
		c[MemorySliceCounter(i)] = counter(1)
	}
	return c
}

// engineCounters lists the non-zero compute-slice and engine counters.
func engineCounters(computeSlices int, e model.MIGEngines) map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{}
	for name, v := range map[string]int{
		counterComputeSlices: computeSlices, counterCopyEngines: e.CopyEngines, counterDecoders: e.Decoders,
		counterEncoders: e.Encoders, counterJPEGEngines: e.JPEGEngines, counterOFAEngines: e.OFAEngines,
	} {
		if v > 0 {
			c[name] = counter(int64(v))
		}
	}
	return c
}

// addEngineCapacities sets the multiprocessor and engine capacities of a
// MIG device, or of a dynamically partitioned GPU (its MIG totals, as
// NVIDIA's driver publishes the whole GPU there), zeros included.
func addEngineCapacities(capacity map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, e model.MIGEngines) {
	for name, v := range map[resourceapi.QualifiedName]int{
		CapacityMultiprocessors: e.Multiprocessors, CapacityCopyEngines: e.CopyEngines, CapacityDecoders: e.Decoders,
		CapacityEncoders: e.Encoders, CapacityJPEGEngines: e.JPEGEngines, CapacityOFAEngines: e.OFAEngines,
	} {
		capacity[name] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(v), resource.DecimalSI)}
	}
}

func counter(v int64) resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
}

// migDevices lists the MIG devices of a GPU: the existing ones for static
// MIG, every placement of every profile for dynamic MIG.
func migDevices(node *model.Node, gpu *model.GPU) ([]resourceapi.Device, error) {
	var out []resourceapi.Device
	switch gpu.Partitioning {
	case model.StaticMIG:
		for _, m := range gpu.MIGDevices {
			d, err := migDevice(node, gpu, m.Profile, m.ProfileID, m.Start, m.MemoryBytes, m.MIGEngines)
			if err != nil {
				return nil, err
			}
			d.Attributes[AttrUUID] = str(m.UUID)
			if strings.Contains(m.Profile, "c.") {
				// Compute instances smaller than their GPU instance share its
				// placement: the compute instance ID tells them apart.
				d.Name += "-" + strconv.Itoa(m.CIID)
			}
			out = append(out, d)
		}
	case model.DynamicMIG:
		for _, p := range gpu.PublishedMIGProfiles() {
			for _, start := range p.Placements {
				d, err := migDevice(node, gpu, p.Name, p.ID, start, p.MemoryBytes, p.MIGEngines)
				if err != nil {
					return nil, err
				}
				consumed := engineCounters(p.Slices, p.MIGEngines)
				for i := start; i < start+p.PlacementSize; i++ {
					consumed[MemorySliceCounter(i)] = counter(1)
				}
				d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: gpu.CounterSetName(), Counters: consumed}}
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// migDevice builds a MIG device: the parent's attributes (model, versions,
// PCI and NUMA placement) with type "mig", parentUUID, profile and the
// MIG capacities.
func migDevice(node *model.Node, gpu *model.GPU, profile string, profileID uint32, start int, memory uint64, e model.MIGEngines) (resourceapi.Device, error) {
	parent, err := gpuDevice(node, gpu)
	if err != nil {
		return resourceapi.Device{}, err
	}
	attrs := maps.Clone(parent.Attributes)
	delete(attrs, AttrUUID)
	delete(attrs, AttrMIGCapable)
	// MIG devices do not do peer-to-peer over NVLink; nor is a MIG device
	// claimed to reach the multi-node NVLink fabric.
	delete(attrs, AttrNVLinkDomain)
	delete(attrs, AttrCliqueID)
	delete(attrs, AttrFabricBandwidthDegraded)
	// Fabric Manager partitions GPUs, not MIG devices.
	for size := range gpu.FabricPartitions {
		delete(attrs, PartitionAttribute(size))
	}
	attrs[AttrType] = str(DeviceTypeMIG)
	attrs[AttrParentUUID] = str(gpu.UUID)
	attrs[AttrProfile] = str(profile)
	attrs[AttrPlacementStart] = integer(start)
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapacityMemory: {Value: *resource.NewQuantity(int64(memory), resource.BinarySI)},
	}
	addEngineCapacities(capacity, e)
	name := model.MIGDeviceName(gpu, profile, profileID, start)
	if n := len(attrs) + len(capacity) + 1; n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		return resourceapi.Device{}, fmt.Errorf("MIG device %s has %d attributes and capacities, the API allows %d",
			name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	return resourceapi.Device{Name: name, Attributes: attrs, Capacity: capacity}, nil
}
