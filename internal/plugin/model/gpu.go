// Package model holds gpudra's device model: what the plugin knows about each
// GPU of the node, independent of where it came from (real NVML or a simulated
// profile) and of how it is published (ResourceSlice) or prepared (CDI).
package model

import (
	"strconv"
	"strings"
)

// GPU is one physical GPU of the node as discovered through NVML.
type GPU struct {
	// Index is the NVML index (nvidia-smi order).
	Index int `json:"index"`
	// Minor is the device minor number: /dev/nvidia<Minor>.
	Minor int `json:"minor"`
	// UUID is the NVML UUID, e.g. "GPU-8f6a...".
	UUID string `json:"uuid"`
	// ProductName as NVML reports it, e.g. "NVIDIA H100 80GB HBM3".
	ProductName string `json:"productName"`
	// Brand, e.g. "Nvidia", "Tesla".
	Brand string `json:"brand"`
	// Architecture, e.g. "Hopper", "Ampere", "Ada Lovelace".
	Architecture string `json:"architecture"`
	// CUDAComputeCapability as "<major>.<minor>", e.g. "9.0".
	CUDAComputeCapability string `json:"cudaComputeCapability"`
	// MemoryBytes is the total framebuffer memory.
	MemoryBytes uint64 `json:"memoryBytes"`
	// PCIBusID in the canonical lower-case domain form "0000:1b:00.0".
	PCIBusID string `json:"pciBusID"`
	// PCIeRoot is the PCIe root complex, e.g. "pci0000:00"; empty when unknown.
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// PCIVendorID and PCIDeviceID are the PCI device's IDs as sysfs shows
	// them (its vendor and device files, e.g. 0x10de and 0x2330); 0 when
	// unknown.
	PCIVendorID uint16 `json:"pciVendorID,omitempty"`
	PCIDeviceID uint16 `json:"pciDeviceID,omitempty"`
	// NUMANode is the NUMA node of the GPU; nil when unknown.
	NUMANode *int `json:"numaNode,omitempty"`
	// NUMANeighbours are the other NUMA nodes of NUMANode's socket at the
	// smallest SLIT distance from it (sub-NUMA clustering splits a socket
	// into several), as sysfs shows them; empty without SNC. NUMANode
	// followed by them is the list form of numaNode (slice.WithNUMAList).
	NUMANeighbours []int `json:"numaNeighbours,omitempty"`
	// ECCEnabled reports whether ECC is on (NVML's current ECC mode); false
	// on a GPU without ECC.
	ECCEnabled bool `json:"eccEnabled"`
	// MIGCapable reports whether the GPU supports MIG at all.
	MIGCapable bool `json:"migCapable"`
	// MIGEnabled reports whether MIG mode is currently enabled.
	MIGEnabled bool `json:"migEnabled"`
	// NVLinkDomain names the group of GPUs of this node that are fully
	// connected by NVLink (directly or through NVSwitch) with this one: the
	// UUID of the group's first GPU. Empty when the GPU has no NVLink peer.
	NVLinkDomain string `json:"nvlinkDomain,omitempty"`
	// Fabric is the GPU's place in a multi-node NVLink fabric; nil when
	// NVML reports none (NOT_SUPPORTED: no fabric, or not asked).
	Fabric *Fabric `json:"fabric,omitempty"`
	// AddressingMode is how the GPU addresses memory the CPU allocated, as
	// NVML reports it (nvmlDeviceGetAddressingMode): "ATS", "HMM" or "None";
	// empty when NVML does not report one (an x86 host that supports
	// neither, or a driver without the call).
	AddressingMode string `json:"addressingMode,omitempty"`
	// ModuleID is the GPU's module (slot) number on an HGX/DGX baseboard
	// (nvmlDeviceGetModuleId), the number NVSwitch Fabric Manager names the
	// GPU by; 0 when NVML reports none (a GPU that is not on a baseboard).
	ModuleID int `json:"moduleID,omitempty"`
	// FabricPartitions maps the size of each NVSwitch Fabric Manager
	// partition holding the GPU to the partition's ID (the partition<N>
	// attributes); set only with --fabric-manager-partitioning.
	FabricPartitions map[int]int `json:"fabricPartitions,omitempty"`
	// MIG is the MIG geometry of a MIG-capable GPU; nil otherwise. It lists
	// every profile of the GPU, published or not.
	MIG *MIGGeometry `json:"mig,omitempty"`
	// UnpublishedMIGProfiles are the profiles of MIG that a dynamically
	// partitioned GPU does not publish (--mig-profiles, see
	// PublishedMIGProfiles). MIG devices of these profiles may still exist
	// (made by hand, or prepared under another setting).
	UnpublishedMIGProfiles []string `json:"unpublishedMIGProfiles,omitempty"`
	// MIGDevices are the MIG devices that exist (MIG mode enabled).
	MIGDevices []MIGDevice `json:"migDevices,omitempty"`
	// Partitioning is how the plugin publishes the GPU (see internal/plugin/mig.Apply).
	Partitioning Partitioning `json:"partitioning,omitempty"`
	// MIGNaming is how its MIG devices are named (MIGDeviceName).
	MIGNaming MIGNaming `json:"migNaming,omitempty"`
	// MIGModeFixed: the GPU's MIG mode changes only with a GPU reset
	// (Ampere), so a dynamically partitioned one publishes its placements
	// but not itself, and its MIG mode is never switched.
	MIGModeFixed bool `json:"migModeFixed,omitempty"`
	// Unreachable is set on a GPU that NVML counts but could not describe
	// at start-up, published from its last known identity (internal/plugin/inventory):
	// why, as the value of the lost taint ("gpu-is-lost", "reset-required"
	// or "unreachable"). Such a GPU is tainted and cannot be prepared.
	// Empty for every GPU discovery described.
	Unreachable string `json:"unreachable,omitempty"`
}

// Node holds node-wide facts and the GPUs of one node.
type Node struct {
	// DriverVersion of the kernel driver, e.g. "550.54.15".
	DriverVersion string `json:"driverVersion"`
	// CUDADriverVersion as "<major>.<minor>", e.g. "12.4".
	CUDADriverVersion string `json:"cudaDriverVersion"`
	GPUs              []GPU  `json:"gpus"`
	// Unavailable are the GPUs NVML counts but discovery could not
	// describe (a GPU fallen off the bus answers nothing). They are not in
	// GPUs unless published from their last known identity.
	Unavailable []UnavailableGPU `json:"unavailable,omitempty"`
	// FabricManager: the plugin uses NVSwitch Fabric Manager's partitions
	// (--fabric-manager-partitioning); GPUs and vfio devices then carry
	// gpuModuleID and partition<N> in every mode.
	FabricManager bool `json:"fabricManager,omitempty"`
	// IOMMUFD: the node offers iommufd (/dev/iommu where the plugin finds
	// /dev/vfio); set only with passthrough. vfio devices carry it as
	// iommuFDEnabled, and a claim preferring iommufd gets it.
	IOMMUFD bool `json:"iommufd,omitempty"`
}

// DeviceName is the name of a whole-GPU device in the ResourceSlice.
func (g GPU) DeviceName() string { return deviceNamePrefix + strconv.Itoa(g.Minor) }

const deviceNamePrefix = "gpu-"

// vfioNamePrefix starts the names of passthrough devices, NVIDIA's form.
const vfioNamePrefix = "gpu-vfio-"

// VFIODeviceName is the name of the GPU's passthrough (vfio) device:
// gpu-vfio-<minor>. NVIDIA's driver numbers them by PCI order instead, which
// is the same on nodes whose minors follow the PCI order.
func (g GPU) VFIODeviceName() string { return vfioNamePrefix + strconv.Itoa(g.Minor) }

// PassthroughEligible says whether the GPU also gets a vfio device when
// passthrough is on: a whole GPU (no MIG partitioning, MIG mode off) that
// answered discovery. NVIDIA's driver likewise offers passthrough only for
// GPUs without MIG devices.
func (g GPU) PassthroughEligible() bool {
	return g.Partitioning == WholeGPU && !g.MIGEnabled && g.Unreachable == ""
}

// IsVFIODeviceName reports whether a published device name is one of
// VFIODeviceName's.
func IsVFIODeviceName(name string) bool { return strings.HasPrefix(name, vfioNamePrefix) }
