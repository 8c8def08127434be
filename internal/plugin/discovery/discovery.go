// Package discovery turns what NVML reports into gpudra's device model
// (internal/plugin/model). It only uses the go-nvml nvml.Interface, so the real library
// and the simulated backends (test/sim) are discovered by the same code.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// PCIeRootResolver is implemented by backends that know the PCIe root complex
// of a GPU without sysfs (the simulated backend does). On real nodes the root
// is resolved from sysfs.
type PCIeRootResolver interface {
	PCIeRoot(pciBusID string) (string, bool)
}

// Options tune discovery.
type Options struct {
	// SysfsRoot, when set, is the root under which /sys is read to find the
	// PCIe root complex, NUMA node and PCI IDs of real GPUs (for tests or a
	// host mounted elsewhere).
	SysfsRoot string
}

// Discover enumerates every GPU NVML reports. The library must already be
// initialized. Failures of the library itself (driver version, device
// count, a library-wide error such as an uninitialized or mismatched
// library) fail discovery. A GPU whose own facts cannot be read (a GPU
// fallen off the bus answers nothing) is left out of node.GPUs and listed in
// node.Unavailable instead: an advertised device with wrong facts would be
// worse than none, and one broken GPU must not take the node's others down.
// Optional facts (PCIe root, NUMA node, NVLink domain, NVLink fabric) are
// left out where they cannot be read (fabric.go).
func Discover(ctx context.Context, lib nvml.Interface, opts Options) (*model.Node, error) {
	logger := klog.FromContext(ctx)
	node := &model.Node{}

	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get driver version", ret)
	}
	node.DriverVersion = driver
	cuda, ret := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get CUDA driver version", ret)
	}
	node.CUDADriverVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)

	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get device count", ret)
	}
	calls := lookupOptionalCalls(lib)
	resolver, _ := lib.(PCIeRootResolver)
	numaResolver, _ := lib.(NUMANodeResolver)
	idResolver, _ := lib.(PCIIDResolver)
	handles := make([]nvml.Device, 0, count)
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		var gpu model.GPU
		var err error
		if ret == nvml.SUCCESS {
			gpu, err = describe(ctx, dev, i, calls)
		} else {
			dev, err = nil, nvmlError(fmt.Sprintf("get handle of GPU %d", i), ret)
		}
		if err != nil {
			if libraryFailure(err) {
				return nil, fmt.Errorf("GPU %d: %w", i, err)
			}
			u := unavailable(i, dev, gpu, err)
			logger.Error(err, "GPU does not answer NVML; the node's other GPUs are discovered without it",
				"index", i, "uuid", u.UUID, "pciBusID", u.PCIBusID, "reason", u.Reason)
			node.Unavailable = append(node.Unavailable, u)
			continue
		}
		gpu.PCIeRoot = pcieRoot(ctx, gpu.PCIBusID, resolver, opts)
		gpu.NUMANode = numaNode(ctx, gpu.PCIBusID, numaResolver, opts)
		gpu.PCIVendorID, gpu.PCIDeviceID = pciIDs(ctx, gpu.PCIBusID, idResolver, opts)
		if gpu.NUMANode != nil && numaResolver == nil {
			gpu.NUMANeighbours = numaNeighbours(ctx, *gpu.NUMANode, opts)
		}
		logger.V(4).Info("Discovered GPU", "index", gpu.Index, "minor", gpu.Minor, "uuid", gpu.UUID,
			"product", gpu.ProductName, "pciBusID", gpu.PCIBusID, "pcieRoot", gpu.PCIeRoot, "migEnabled", gpu.MIGEnabled,
			"clique", gpu.Fabric.Clique())
		if f := gpu.Fabric; f != nil && !f.Attached() {
			logger.V(2).Info("GPU not attached to a multi-node NVLink fabric, publishing no clique", "uuid", gpu.UUID,
				"fabricState", f.State, "fabricError", f.Error, "clusterUUID", f.ClusterUUID)
		}
		node.GPUs = append(node.GPUs, gpu)
		handles = append(handles, dev)
	}
	nvlinkDomains(ctx, handles, node.GPUs)
	logCliques(ctx, node.GPUs)
	return node, nil
}

// describe reads one GPU's facts; calls are the optional calls the library has.
func describe(ctx context.Context, dev nvml.Device, index int, calls optionalCalls) (model.GPU, error) {
	gpu := model.GPU{Index: index}
	var ret nvml.Return
	if gpu.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return gpu, nvmlError("get UUID", ret)
	}
	if gpu.Minor, ret = dev.GetMinorNumber(); ret != nvml.SUCCESS {
		return gpu, nvmlError("get minor number", ret)
	}
	if gpu.ProductName, ret = dev.GetName(); ret != nvml.SUCCESS {
		return gpu, nvmlError("get product name", ret)
	}
	brand, ret := dev.GetBrand()
	if ret != nvml.SUCCESS {
		return gpu, nvmlError("get brand", ret)
	}
	gpu.Brand = BrandName(brand)
	arch, ret := dev.GetArchitecture()
	if ret != nvml.SUCCESS {
		return gpu, nvmlError("get architecture", ret)
	}
	gpu.Architecture = ArchitectureName(arch)
	major, minor, ret := dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return gpu, nvmlError("get CUDA compute capability", ret)
	}
	gpu.CUDAComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	// Unified-memory GPUs answer NOT_SUPPORTED: the GPU is published
	// without a memory capacity (MemoryBytes 0), as NVIDIA's driver does.
	switch mem, ret := dev.GetMemoryInfo(); ret {
	case nvml.SUCCESS:
		gpu.MemoryBytes = mem.Total
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return gpu, nvmlError("get memory info", ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return gpu, nvmlError("get PCI info", ret)
	}
	busID, err := NormalizePCIBusID(pciBusIDString(pci))
	if err != nil {
		return gpu, err
	}
	gpu.PCIBusID = busID
	// The current ECC mode, not the pending one: a change needs a reset to
	// take effect. No ECC (NOT_SUPPORTED) is "not enabled".
	switch ecc, _, ret := dev.GetEccMode(); ret {
	case nvml.SUCCESS:
		gpu.ECCEnabled = ecc == nvml.FEATURE_ENABLED
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return gpu, nvmlError("get ECC mode", ret)
	}
	current, _, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		gpu.MIGCapable = true
		gpu.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return gpu, nvmlError("get MIG mode", ret)
	}
	if gpu.MIGCapable {
		if err := describeMIG(ctx, dev, &gpu); err != nil {
			return gpu, err
		}
	}
	f, err := fabric(ctx, dev, gpu.UUID, calls)
	if err != nil {
		return gpu, err
	}
	gpu.Fabric = f
	if gpu.AddressingMode, err = addressingMode(ctx, dev, gpu.UUID, calls); err != nil {
		return gpu, err
	}
	if gpu.ModuleID, err = moduleID(ctx, dev, gpu.UUID, calls); err != nil {
		return gpu, err
	}
	return gpu, nil
}

func pcieRoot(ctx context.Context, busID string, resolver PCIeRootResolver, opts Options) string {
	if resolver != nil {
		root, _ := resolver.PCIeRoot(busID)
		return root
	}
	var mods []deviceattribute.MachineModifier
	if opts.SysfsRoot != "" {
		mods = append(mods, deviceattribute.WithFSFromRoot(opts.SysfsRoot))
	}
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, mods...)
	if err != nil || attr.Value.StringValue == nil {
		// Not fatal: the attribute is simply not published.
		klog.FromContext(ctx).V(2).Info("PCIe root unknown, not publishing pcieRoot", "pciBusID", busID, "err", err)
		return ""
	}
	return *attr.Value.StringValue
}

// pciBusIDString reads NVML's NUL-terminated bus ID ("00000000:1B:00.0").
func pciBusIDString(pci nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// NormalizePCIBusID converts NVML's bus ID ("00000000:1B:00.0", 8-digit
// domain, upper case) into the sysfs/Kubernetes form ("0000:1b:00.0").
func NormalizePCIBusID(id string) (string, error) {
	id = strings.ToLower(strings.TrimSpace(id))
	parts := strings.Split(id, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("unexpected PCI bus ID %q from NVML: want <domain>:<bus>:<device>.<function>", id)
	}
	domain := parts[0]
	if len(domain) > 4 {
		domain = domain[len(domain)-4:]
	}
	for len(domain) < 4 {
		domain = "0" + domain
	}
	return domain + ":" + parts[1] + ":" + parts[2], nil
}

func nvmlError(what string, ret nvml.Return) error {
	return fmt.Errorf("NVML %s: %w", what, ReturnError(ret))
}

// ReturnError turns an nvml.Return into an error that errors.Is can match.
func ReturnError(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return returnError(ret)
}

type returnError nvml.Return

func (r returnError) Error() string {
	if s := nvml.Return(r).Error(); s != "" {
		return s
	}
	return fmt.Sprintf("NVML error %d", int(r))
}

// Is makes errors.Is(err, nvml.ERROR_NOT_SUPPORTED) work.
func (r returnError) Is(target error) bool {
	var t nvml.Return
	if errors.As(target, &t) {
		return nvml.Return(r) == t
	}
	return false
}
