package slice

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// DeviceTypeVFIO is the value of the type attribute of a GPU's passthrough
// device (NVIDIA's name).
const DeviceTypeVFIO = "vfio"

// Attributes only vfio devices carry, with NVIDIA's names, types and
// formats, in both modes.
const (
	// AttrIOMMUFDEnabled: the node offers iommufd (model.Node.IOMMUFD), so
	// a VfioDeviceConfig preferring it gets /dev/vfio/devices/vfio<N>.
	AttrIOMMUFDEnabled resourceapi.QualifiedName = "iommuFDEnabled"
	// AttrVendorID and AttrDeviceID are the GPU's PCI IDs as sysfs shows
	// them, "0x10de" and e.g. "0x2330" (model.GPU.PCIVendorID,
	// PCIDeviceID); absent when unknown.
	AttrVendorID resourceapi.QualifiedName = "vendorID"
	AttrDeviceID resourceapi.QualifiedName = "deviceID"
)

// passthroughCounter is what a GPU's device and its vfio device each
// consume all of, so that the scheduler never allocates both.
const passthroughCounter = "gpu"

// passthroughCounterSet names the counter set of one GPU's two devices.
func passthroughCounterSet(g *model.GPU) string { return g.DeviceName() + "-passthrough" }

// WithPassthrough adds a vfio device (model.GPU.VFIODeviceName, type vfio)
// for each eligible GPU whose device is among devices, and makes the two
// exclusive through a counter set of their own with one counter of 1 that
// both consume: a claim gets the GPU either for containers (nvidia driver)
// or for a virtual machine (vfio-pci), never both at once. NVIDIA's driver
// withdraws the other device from its ResourceSlice once one is prepared;
// counters let the scheduler see it before any prepare.
//
// The vfio device carries the GPU's identity as discovered (uuid,
// productName, index, minor) and its standard PCI, PCIe root and NUMA
// attributes, copied from the GPU's device, so run it after every other
// attribute step; also iommuFDEnabled, vendorID and deviceID, as NVIDIA's
// vfio devices do. With Fabric Manager partitioning (model.Node.FabricManager)
// it also carries the GPU's gpuModuleID and partition<N>.
func WithPassthrough(node *model.Node, devices []resourceapi.Device) ([]resourceapi.Device, []resourceapi.CounterSet) {
	byName := make(map[string]int, len(devices))
	for i := range devices {
		byName[devices[i].Name] = i
	}
	var counters []resourceapi.CounterSet
	var added []resourceapi.Device
	for i := range node.GPUs {
		g := &node.GPUs[i]
		j, ok := byName[g.DeviceName()]
		if !ok || !g.PassthroughEligible() {
			continue
		}
		set := passthroughCounterSet(g)
		counters = append(counters, resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{passthroughCounter: counter(1)}})
		consume := resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourceapi.Counter{passthroughCounter: counter(1)}}
		devices[j].ConsumesCounters = append(devices[j].ConsumesCounters, consume)
		v := resourceapi.Device{
			Name:             g.VFIODeviceName(),
			Attributes:       map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrType: str(DeviceTypeVFIO)},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{*consume.DeepCopy()},
		}
		for name, a := range devices[j].Attributes {
			switch {
			case strings.HasPrefix(string(name), "resource.kubernetes.io/"),
				name == AttrUUID, name == AttrProductName, name == AttrIndex, name == AttrMinor,
				node.FabricManager && (name == AttrGPUModuleID || isPartitionAttribute(name)):
				v.Attributes[name] = *a.DeepCopy()
			}
		}
		v.Attributes[AttrIOMMUFDEnabled] = resourceapi.DeviceAttribute{BoolValue: ptr(node.IOMMUFD)}
		if g.PCIVendorID != 0 && g.PCIDeviceID != 0 {
			v.Attributes[AttrVendorID] = str(fmt.Sprintf("0x%04x", g.PCIVendorID))
			v.Attributes[AttrDeviceID] = str(fmt.Sprintf("0x%04x", g.PCIDeviceID))
		}
		added = append(added, v)
	}
	return append(devices, added...), counters
}
