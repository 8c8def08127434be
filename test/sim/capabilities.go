package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// This file holds a model's `nvml:` mapping: where NVML on that model
// answers differently from a discrete x86 data-center GPU. Absent, the
// model answers as an x86 PCIe or SXM GPU does (docs/nvml-fidelity.md):
//
//	nvml:
//	  numaNodeId: gpu-memory      # not-supported (default) or gpu-memory
//	  unifiedMemory: true         # GetMemoryInfo(_v2) answer NOT_SUPPORTED
//	  migProfileErrors:           # geometry queries that fail for a profile
//	    - {profile: 1g.10gb+me, call: GetGpuInstancePossiblePlacements, return: NOT_SUPPORTED}
//
// numaNodeId: nvml.h says nvmlDeviceGetNumaNodeId "only applies to
// platforms where the GPUs are NUMA nodes". On x86 servers it answers
// NOT_SUPPORTED; the PCI device's NUMA node is in sysfs (the profile's
// numaNode, see Server.PCINUMANode). On Grace (GH200, GB200) the GPU's
// memory is a NUMA node of its own: gpu-memory answers SUCCESS with that
// node, numbered after every CPU node of the profile (highest numaNode + 1
// + the GPU's index), never the CPU node the PCI device hangs off.

// NUMANodeID values of nvmlSpec.
const (
	NUMANodeIDNotSupported = "not-supported"
	NUMANodeIDGPUMemory    = "gpu-memory"
)

// nvmlSpec is the on-disk `nvml:` mapping of a model.
type nvmlSpec struct {
	NUMANodeID       string                `json:"numaNodeId"`
	UnifiedMemory    bool                  `json:"unifiedMemory"`
	MIGProfileErrors []migProfileErrorSpec `json:"migProfileErrors"`
	GPUFabric        bool                  `json:"gpuFabric"`
	AddressingMode   string                `json:"addressingMode"`
}

type migProfileErrorSpec struct {
	Profile string `json:"profile"`
	Call    string `json:"call"`
	Return  string `json:"return"`
}

// NVMLCapabilities are the validated `nvml:` settings of a model.
type NVMLCapabilities struct {
	// NUMANodeID is NUMANodeIDNotSupported or NUMANodeIDGPUMemory.
	NUMANodeID string
	// UnifiedMemory: GetMemoryInfo and GetMemoryInfo_v2 answer NOT_SUPPORTED.
	UnifiedMemory bool
	// MIGProfileErrors: per GPU instance profile name, per call, the return.
	MIGProfileErrors map[string]map[string]nvml.Return
	// GPUFabric: the GPU is registered with an NVLink fabric manager and
	// answers nvmlDeviceGetGpuFabricInfo(V) (fabric.go); without it they
	// answer NOT_SUPPORTED.
	GPUFabric bool
	// AddressingMode is what nvmlDeviceGetAddressingMode answers (addressing.go).
	AddressingMode AddressingMode
}

// migGeometryCalls are the calls migProfileErrors may make fail.
var migGeometryCalls = []string{"GetGpuInstanceProfileInfo", "GetGpuInstancePossiblePlacements"}

// geometryReturns are the failures real NVML gives for a profile it lists
// but does not support on this GPU or driver.
var geometryReturns = map[string]nvml.Return{
	"NOT_SUPPORTED": nvml.ERROR_NOT_SUPPORTED, "INVALID_ARGUMENT": nvml.ERROR_INVALID_ARGUMENT,
}

func (s *nvmlSpec) validate(at string, arch nvml.DeviceArchitecture, mig *MIG) (NVMLCapabilities, error) {
	c := NVMLCapabilities{NUMANodeID: NUMANodeIDNotSupported, AddressingMode: AddressingNotSupported}
	if s == nil {
		return c, nil
	}
	switch s.NUMANodeID {
	case "", NUMANodeIDNotSupported:
	case NUMANodeIDGPUMemory:
		c.NUMANodeID = NUMANodeIDGPUMemory
	default:
		return c, fmt.Errorf("%s: %q is neither %s nor %s", join(at, "numaNodeId"), s.NUMANodeID,
			NUMANodeIDNotSupported, NUMANodeIDGPUMemory)
	}
	c.UnifiedMemory = s.UnifiedMemory
	if s.GPUFabric && arch < nvml.DEVICE_ARCH_HOPPER {
		// nvml.h documents the fabric calls "For Hopper or newer fully supported devices".
		return c, fmt.Errorf("%s: only for Hopper or newer GPUs", join(at, "gpuFabric"))
	}
	c.GPUFabric = s.GPUFabric
	mode, err := parseAddressingMode(join(at, "addressingMode"), s.AddressingMode, arch)
	if err != nil {
		return c, err
	}
	c.AddressingMode = mode
	for i, e := range s.MIGProfileErrors {
		here := fmt.Sprintf("%s[%d]", join(at, "migProfileErrors"), i)
		if mig == nil {
			return c, fmt.Errorf("%s: only for a MIG-capable model", here)
		}
		if _, ok := mig.GPUInstanceProfileByName(e.Profile); !ok {
			return c, fmt.Errorf("%s.profile: the model has no GPU instance profile %q", here, e.Profile)
		}
		if !slices.Contains(migGeometryCalls, e.Call) {
			return c, fmt.Errorf("%s.call: %q is not one of %s", here, e.Call, strings.Join(migGeometryCalls, ", "))
		}
		ret, ok := geometryReturns[e.Return]
		if !ok {
			return c, fmt.Errorf("%s.return: %q is not one of %s", here, e.Return, strings.Join(sortedKeys(geometryReturns), ", "))
		}
		if c.MIGProfileErrors == nil {
			c.MIGProfileErrors = map[string]map[string]nvml.Return{}
		}
		if c.MIGProfileErrors[e.Profile] == nil {
			c.MIGProfileErrors[e.Profile] = map[string]nvml.Return{}
		}
		c.MIGProfileErrors[e.Profile][e.Call] = ret
	}
	return c, nil
}

// migProfileError is the failure the model gives for call on profile p.
func (c *NVMLCapabilities) migProfileError(p *GPUInstanceProfile, call string) nvml.Return {
	if p == nil {
		return nvml.SUCCESS
	}
	if ret, ok := c.MIGProfileErrors[p.Name][call]; ok {
		return ret
	}
	return nvml.SUCCESS
}

// setCapabilityFuncs overrides the calls whose answers the model's `nvml:`
// mapping changes. It runs after the other XxxFunc fields are set and
// before finishHandle, so that a lost GPU still answers GPU_IS_LOST.
func (d *device) setCapabilityFuncs() {
	m := d.model()
	c := &m.NVML
	gpuMemoryNode := d.srv.gpuMemoryNUMANode(d.gpu.Index)
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		if c.NUMANodeID == NUMANodeIDGPUMemory {
			return gpuMemoryNode, nvml.SUCCESS
		}
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetAddressingModeFunc = func() (nvml.DeviceAddressingMode, nvml.Return) { return d.addressingMode() }
	if c.UnifiedMemory {
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
		d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
	}
	if len(c.MIGProfileErrors) == 0 || m.MIG == nil {
		return
	}
	info, placements := d.GetGpuInstanceProfileInfoFunc, d.GetGpuInstancePossiblePlacementsFunc
	d.GetGpuInstanceProfileInfoFunc = func(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if ret := c.migProfileError(m.MIG.profileByNVMLIndex(profile), "GetGpuInstanceProfileInfo"); ret != nvml.SUCCESS {
			return nvml.GpuInstanceProfileInfo{}, ret
		}
		return info(profile)
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(i *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		if ret := c.migProfileError(d.profileFor(i), "GetGpuInstancePossiblePlacements"); ret != nvml.SUCCESS {
			return nil, ret
		}
		return placements(i)
	}
}

// gpuMemoryNUMANode is the NUMA node of GPU index's memory on a platform
// where GPUs are NUMA nodes: after every CPU node the profile names.
func (s *Server) gpuMemoryNUMANode(index int) int {
	highest := -1
	for i := range s.profile.GPUs {
		highest = max(highest, s.profile.GPUs[i].NUMANode)
	}
	return highest + 1 + index
}

// PCINUMANode is the NUMA node of the GPU's PCI device, as sysfs shows it
// (/sys/bus/pci/devices/<bus ID>/numa_node): the profile's numaNode, -1
// when the profile marks it unknown (as the kernel does when the firmware
// publishes no PCIe affinity). NVML does not report it on x86 servers.
// False for an unknown bus ID.
func (s *Server) PCINUMANode(pciBusID string) (int, bool) {
	addr, err := parsePCIAddress(pciBusID)
	if err != nil {
		return -1, false
	}
	for _, d := range s.devices {
		if d.addr == addr {
			return d.gpu.NUMANode, true
		}
	}
	return -1, false
}
