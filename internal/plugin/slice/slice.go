// Package slice turns gpudra's device model into the ResourceSlices the
// kubelet plugin publishes: one pool per node, one device per GPU, split into
// as many slices as the API limits require.
package slice

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// Attribute names in the driver's domain (unqualified names belong to the
// driver). They are those of NVIDIA's driver where both publish a fact, but a
// CEL expression names the domain too (gpu.gpudra.io natively): NVIDIA's
// expressions carry over unchanged only in the NVIDIA compatibility mode
// (internal/shared/compat, WithNVIDIAAttributes).
const (
	AttrType                  resourceapi.QualifiedName = "type"
	AttrUUID                  resourceapi.QualifiedName = "uuid"
	AttrProductName           resourceapi.QualifiedName = "productName"
	AttrBrand                 resourceapi.QualifiedName = "brand"
	AttrArchitecture          resourceapi.QualifiedName = "architecture"
	AttrCUDAComputeCapability resourceapi.QualifiedName = "cudaComputeCapability"
	AttrDriverVersion         resourceapi.QualifiedName = "driverVersion"
	AttrCUDADriverVersion     resourceapi.QualifiedName = "cudaDriverVersion"
	AttrIndex                 resourceapi.QualifiedName = "index"
	AttrMinor                 resourceapi.QualifiedName = "minor"
	AttrMIGCapable            resourceapi.QualifiedName = "migCapable"
	// AttrECCEnabled is NVML's current ECC mode (false without ECC).
	AttrECCEnabled resourceapi.QualifiedName = "eccEnabled"
	// AttrNVLinkDomain is shared by the GPUs of a node that are fully
	// connected by NVLink (model.GPU.NVLinkDomain); absent without NVLink.
	// Use it in matchAttribute constraints to get NVLink-connected GPUs.
	AttrNVLinkDomain resourceapi.QualifiedName = "nvlinkDomain"
	// AttrCliqueID is the GPU's multi-node NVLink clique (a GB200 NVL72
	// rack's fabric), "<cluster UUID>.<clique ID>" as NVIDIA's drivers name
	// cliques (model.Fabric.Clique); absent unless the fabric manager
	// registered the GPU without error in a multi-node fabric. NVIDIA's GPU
	// plugin publishes no such attribute: the name is gpudra's in both modes.
	AttrCliqueID resourceapi.QualifiedName = "cliqueID"
	// AttrFabricBandwidthDegraded is NVML's fabric health: the GPU's NVLink
	// fabric bandwidth is degraded; absent where the driver does not report it.
	AttrFabricBandwidthDegraded resourceapi.QualifiedName = "fabricBandwidthDegraded"
	// AttrAddressingMode is how the GPU addresses memory the CPU allocated
	// (model.GPU.AddressingMode: "ATS", "HMM" or "None"), NVIDIA's name and
	// values; absent where NVML reports none. MIG devices carry their
	// parent's.
	AttrAddressingMode resourceapi.QualifiedName = "addressingMode"
	// AttrGPUModuleID is the GPU's module number on an HGX/DGX baseboard
	// (model.GPU.ModuleID), NVIDIA's name and type; absent where NVML
	// reports none. MIG devices carry their parent's. In the NVIDIA
	// compatibility mode only GPUs and vfio devices carry it, and only
	// with Fabric Manager partitioning (WithNVIDIAAttributes).
	AttrGPUModuleID resourceapi.QualifiedName = "gpuModuleID"

	CapacityMemory resourceapi.QualifiedName = "memory"

	// DeviceTypeGPU is the value of the type attribute for whole GPUs.
	DeviceTypeGPU = "gpu"
)

// Options controls how slices are cut.
type Options struct {
	// MaxDevicesPerSlice defaults to the API maximum (128). Devices with
	// taints or counters lower the API limit to 64; callers that publish
	// such devices pass that limit.
	MaxDevicesPerSlice int
	// ConsumableShares publishes whole GPUs and static MIG devices as
	// consumable shares (see WithConsumableShares); the zero value does not.
	ConsumableShares ConsumableShares
	// NVIDIAAttributes adds the attributes and capacities of NVIDIA's DRA
	// driver (WithNVIDIAAttributes), for the NVIDIA compatibility mode.
	NVIDIAAttributes bool
	// NUMAList publishes numaNode in its list form (WithNUMAList).
	NUMAList bool
	// Passthrough adds each eligible GPU's vfio device (WithPassthrough).
	Passthrough bool
}

// Devices converts every GPU of the node into ResourceSlice devices: the
// GPU itself unless it is in static MIG mode, and its MIG devices (see
// model.Partitioning). The devices of a GPU published from its last known
// identity (model.GPU.Unreachable) carry the NoExecute lost taint.
func Devices(node *model.Node) ([]resourceapi.Device, error) {
	devices := make([]resourceapi.Device, 0, len(node.GPUs))
	for i := range node.GPUs {
		g := &node.GPUs[i]
		first := len(devices)
		if g.PublishesWhole() {
			d, err := gpuDevice(node, g)
			if err != nil {
				return nil, err
			}
			if g.Partitioning == model.DynamicMIG {
				d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: g.CounterSetName(), Counters: wholeCounters(g.MIG)}}
				if d.Capacity == nil {
					d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
				}
				addEngineCapacities(d.Capacity, g.MIG.Totals)
				if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
					return nil, fmt.Errorf("GPU %s has %d attributes and capacities, the API allows %d",
						g.UUID, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
				}
			}
			devices = append(devices, d)
		}
		migs, err := migDevices(node, g)
		if err != nil {
			return nil, err
		}
		devices = append(devices, migs...)
		if g.Unreachable != "" {
			for j := first; j < len(devices); j++ {
				devices[j].Taints = append(devices[j].Taints, resourceapi.DeviceTaint{
					Key: health.KeyLost, Value: g.Unreachable, Effect: resourceapi.DeviceTaintEffectNoExecute})
			}
		}
	}
	return devices, nil
}

// Resources builds the DriverResources of one node: a single pool named after
// the node, whose devices are split across slices of at most
// opts.MaxDevicesPerSlice devices. A node without GPUs still publishes one
// empty slice, so that "driver up, no devices" differs from "no driver".
func Resources(poolName string, node *model.Node, opts Options) (resourceslice.DriverResources, error) {
	devices, err := Devices(node)
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	if opts.NVIDIAAttributes {
		if err := WithNVIDIAAttributes(node, devices); err != nil {
			return resourceslice.DriverResources{}, err
		}
	}
	if err := WithConsumableShares(devices, opts.ConsumableShares); err != nil {
		return resourceslice.DriverResources{}, err
	}
	if opts.NUMAList {
		WithNUMAList(node, devices)
	}
	counters := counterSets(node)
	if opts.Passthrough {
		var vfio []resourceapi.CounterSet
		devices, vfio = WithPassthrough(node, devices)
		counters = append(counters, vfio...)
	}
	return PackWithCounters(poolName, devices, counters, opts), nil
}

// Pack splits devices into slices of one pool.
func Pack(poolName string, devices []resourceapi.Device, opts Options) resourceslice.DriverResources {
	return PackWithCounters(poolName, devices, nil, opts)
}

// PackWithCounters splits devices and counter sets into slices of one pool,
// as the API requires: a slice holds either devices or counter sets, at
// most 8 counter sets, and at most 64 devices once any device consumes
// counters, has taints or a list-valued attribute.
func PackWithCounters(poolName string, devices []resourceapi.Device, counters []resourceapi.CounterSet, opts Options) resourceslice.DriverResources {
	max := opts.MaxDevicesPerSlice
	if max <= 0 || max > resourceapi.ResourceSliceMaxDevices {
		max = resourceapi.ResourceSliceMaxDevices
	}
	for _, d := range devices {
		if len(d.ConsumesCounters) > 0 || len(d.Taints) > 0 || hasListAttribute(d) {
			max = min(max, resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)
			break
		}
	}
	var slices []resourceslice.Slice
	for start := 0; start < len(counters); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(counters))
		slices = append(slices, resourceslice.Slice{SharedCounters: counters[start:end]})
	}
	for start := 0; start < len(devices); start += max {
		end := min(start+max, len(devices))
		slices = append(slices, resourceslice.Slice{Devices: devices[start:end]})
	}
	if len(slices) == 0 {
		slices = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{poolName: {Slices: slices}}}
}

func gpuDevice(node *model.Node, gpu *model.GPU) (resourceapi.Device, error) {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:         str(DeviceTypeGPU),
		AttrUUID:         str(gpu.UUID),
		AttrProductName:  str(gpu.ProductName),
		AttrBrand:        str(gpu.Brand),
		AttrArchitecture: str(gpu.Architecture),
		AttrIndex:        integer(gpu.Index),
		AttrMinor:        integer(gpu.Minor),
		AttrMIGCapable:   {BoolValue: &gpu.MIGCapable},
		AttrECCEnabled:   {BoolValue: &gpu.ECCEnabled},
	}
	versions := []struct {
		name  resourceapi.QualifiedName
		value string
	}{
		{AttrCUDAComputeCapability, gpu.CUDAComputeCapability},
		{AttrDriverVersion, node.DriverVersion},
		{AttrCUDADriverVersion, node.CUDADriverVersion},
	}
	for _, v := range versions {
		sv, err := Semver(v.value)
		if err != nil {
			return resourceapi.Device{}, fmt.Errorf("GPU %s attribute %s: %w", gpu.UUID, v.name, err)
		}
		attrs[v.name] = resourceapi.DeviceAttribute{VersionValue: &sv}
	}
	if gpu.PCIBusID != "" {
		attr, err := deviceattribute.GetPCIBusIDAttribute(gpu.PCIBusID)
		if err != nil {
			return resourceapi.Device{}, fmt.Errorf("GPU %s: %w", gpu.UUID, err)
		}
		attrs[attr.Name] = attr.Value
	}
	if gpu.PCIeRoot != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = str(gpu.PCIeRoot)
	}
	if gpu.NVLinkDomain != "" {
		attrs[AttrNVLinkDomain] = str(gpu.NVLinkDomain)
	}
	maps.Copy(attrs, FabricAttributes(gpu.Fabric))
	if gpu.AddressingMode != "" {
		attrs[AttrAddressingMode] = str(gpu.AddressingMode)
	}
	if gpu.ModuleID > 0 {
		attrs[AttrGPUModuleID] = integer(gpu.ModuleID)
	}
	for size, id := range gpu.FabricPartitions {
		attrs[PartitionAttribute(size)] = integer(id)
	}
	if gpu.NUMANode != nil {
		attr, err := deviceattribute.GetNUMANodeAttribute(*gpu.NUMANode, deviceattribute.ScalarAttribute)
		if err != nil {
			return resourceapi.Device{}, fmt.Errorf("GPU %s: %w", gpu.UUID, err)
		}
		attrs[attr.Name] = attr.Value
	}
	for name, a := range attrs {
		if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
			return resourceapi.Device{}, fmt.Errorf("GPU %s attribute %s: value %q is longer than the API's %d characters",
				gpu.UUID, name, *a.StringValue, resourceapi.DeviceAttributeMaxValueLength)
		}
	}
	// A unified-memory GPU's NVML reports no memory size: no capacity.
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	if gpu.MemoryBytes > 0 {
		capacity[CapacityMemory] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(gpu.MemoryBytes), resource.BinarySI)}
	}
	if n := len(attrs) + len(capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		return resourceapi.Device{}, fmt.Errorf("GPU %s has %d attributes and capacities, the API allows %d",
			gpu.UUID, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	if len(capacity) == 0 {
		capacity = nil
	}
	return resourceapi.Device{Name: gpu.DeviceName(), Attributes: attrs, Capacity: capacity}, nil
}

// Semver turns NVIDIA version strings into the semantic versions the API
// requires: "9.0" → "9.0.0", "12.4" → "12.4.0", "535.104.05" → "535.104.5"
// (semver forbids leading zeros), "550.54.15" unchanged.
func Semver(v string) (string, error) {
	parts := strings.Split(strings.TrimSpace(v), ".")
	if len(parts) == 0 || len(parts) > 3 || parts[0] == "" {
		return "", fmt.Errorf("version %q is not of the form <major>[.<minor>[.<patch>]]", v)
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return "", fmt.Errorf("version %q: component %q is not a number", v, p)
		}
		parts[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, "."), nil
}

// PartitionAttribute names the attribute of a GPU (and its vfio device)
// whose value is the ID of the NVSwitch Fabric Manager partition of size
// GPUs holding it (NVIDIA's name and type): partition1, partition2, ….
func PartitionAttribute(size int) resourceapi.QualifiedName {
	return resourceapi.QualifiedName("partition" + strconv.Itoa(size))
}

// isPartitionAttribute says whether name is a PartitionAttribute.
func isPartitionAttribute(name resourceapi.QualifiedName) bool {
	n, ok := strings.CutPrefix(string(name), "partition")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

func integer(i int) resourceapi.DeviceAttribute {
	v := int64(i)
	return resourceapi.DeviceAttribute{IntValue: &v}
}

// FabricAttributes are the attributes a GPU's NVLink fabric gives its
// device: cliqueID once it is attached to a multi-node fabric,
// fabricBandwidthDegraded where the driver reports the health mask. The
// GPU plugin's fabric poll compares them to tell a change worth
// republishing.
func FabricAttributes(f *model.Fabric) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if c := f.Clique(); c != "" {
		attrs[AttrCliqueID] = str(c)
	}
	if f != nil {
		if degraded, ok := f.Health[model.FabricDegradedBandwidth]; ok {
			attrs[AttrFabricBandwidthDegraded] = resourceapi.DeviceAttribute{BoolValue: &degraded}
		}
	}
	return attrs
}
