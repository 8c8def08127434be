package sim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Profile is a parsed and validated simulation profile: the GPUs of one
// simulated node. Treat it as read-only; a Server shares it.
type Profile struct {
	// Name identifies the profile; it seeds the simulated UUIDs.
	Name        string
	Description string
	// DriverVersion as reported by nvmlSystemGetDriverVersion, e.g. "550.90.07".
	DriverVersion string
	// CUDADriverVersion in NVML's encoding: 1000*major + 10*minor (12.4 is 12040).
	CUDADriverVersion int
	// GPUs in NVML index order, which is PCI bus ID order.
	GPUs []GPU
	// NUMANodesPerSocket is the host's sub-NUMA clustering: NUMA nodes per
	// CPU socket (1 without SNC). See Server.NUMATopology.
	NUMANodesPerSocket int
	// FabricManager is how the node runs NVSwitch Fabric Manager
	// (fabricmanager.go); FabricManagerNone without it.
	FabricManager FabricManagerMode
	// IOMMUFD: the node's kernel offers iommufd. Nothing in NVML shows
	// it; a fake driver root of the profile has /dev/iommu, and its
	// simulated kernel gives each GPU bound to vfio-pci a VFIO cdev
	// (test/fakedriver).
	IOMMUFD bool
	// Source says where the profile came from: "builtin" or a file path.
	Source string
}

// GPU is one simulated GPU of a profile.
type GPU struct {
	// Index is the NVML index and the device minor number.
	Index int
	Model *Model
	// PCIBusID in the canonical lower-case form "0000:1b:00.0".
	PCIBusID string
	// NUMANode of the GPU; -1 when the profile marks it unknown.
	NUMANode int
	// PCIeRoot is the PCIe root complex, e.g. "pci0000:00"; "" when unknown.
	PCIeRoot string
	// MIGEnabled is the MIG mode the GPU starts with.
	MIGEnabled bool
	// MIGDevices lists GPU instance profile names (e.g. "3g.40gb") created at
	// start, each with one compute instance spanning the GPU instance.
	MIGDevices []string
	// ECCEnabled is the GPU's current (and pending) ECC mode; only
	// meaningful when Model.ECC is true.
	ECCEnabled bool
	// NVLinkDomain numbers the profile's NVLink domain the GPU belongs to:
	// 1 + its index in the profile's nvlink list; 0 when it has no NVLink
	// peer (see nvlink.go).
	NVLinkDomain int
	// Fabric is the GPU's NVLink fabric registration (fabric.go); nil when
	// the profile gives none (a gpuFabric model then reports not-started).
	Fabric *Fabric
	// ModuleID is the GPU's baseboard module number (moduleid.go); 0 when
	// the profile gives none.
	ModuleID int
}

// Model is a GPU model from the built-in catalogue or from a profile file.
type Model struct {
	// Name is the catalogue key, e.g. "h100-sxm5-80gb".
	Name string
	// ProductName as NVML reports it, e.g. "NVIDIA H100 80GB HBM3".
	ProductName            string
	Brand                  nvml.BrandType
	Architecture           nvml.DeviceArchitecture
	ComputeCapabilityMajor int
	ComputeCapabilityMinor int
	MemoryBytes            uint64
	// Multiprocessors is the SM count of the full GPU (0 when unknown).
	Multiprocessors int
	// PCIDeviceID and PCISubsystemID in NVML's encoding: device<<16 | vendor.
	PCIDeviceID     uint32
	PCISubsystemID  uint32
	BoardPartNumber string
	// MIG is nil when the model is not MIG-capable.
	MIG *MIG
	// ECC reports whether the model has ECC memory; ECCDefault is the mode
	// it ships with.
	ECC, ECCDefault bool
	// Power is nil when the model does not describe its power draw.
	Power *PowerRange
	// SMClock is nil when the model does not describe its SM clocks.
	SMClock *ClockRange
	// NVML is where the model's NVML answers differ from a discrete x86
	// GPU's (the model's `nvml:` mapping, capabilities.go).
	NVML NVMLCapabilities
}

// PowerRange is a model's power draw: idle and the enforced limit (TDP).
type PowerRange struct{ IdleWatts, LimitWatts int }

// ClockRange is a model's SM clock: idle and the highest boost clock.
type ClockRange struct{ IdleMHz, MaxMHz int }

// MIGCapable reports whether the model supports MIG.
func (m *Model) MIGCapable() bool { return m.MIG != nil }

// MIG is the MIG geometry of a model.
type MIG struct {
	// MemorySlices is the number of placement units (8 on A100/H100/H200).
	MemorySlices int
	// ComputeSlices is the largest GPU instance slice count (7 on A100/H100).
	ComputeSlices int
	// MaxDevices is what nvmlDeviceGetMaxMigDeviceCount reports.
	MaxDevices int
	// MultiprocessorsPerSlice sizes compute instances smaller than their GPU instance.
	MultiprocessorsPerSlice int
	// GPUInstanceProfiles ordered by NVMLProfile.
	GPUInstanceProfiles []GPUInstanceProfile
}

// GPUInstanceProfile is one GPU instance profile, as listed by
// `nvidia-smi mig -lgip` and `nvidia-smi mig -lgipp`.
type GPUInstanceProfile struct {
	// Name such as "1g.10gb" or "1g.10gb+me".
	Name string
	// NVMLProfile is the NVML_GPU_INSTANCE_PROFILE_* index passed to
	// nvmlDeviceGetGpuInstanceProfileInfo.
	NVMLProfile int
	// ID is the unique profile ID NVML reports in the profile info (19 for 1g.10gb).
	ID              uint32
	Slices          int
	MemoryMiB       uint64
	Multiprocessors int
	CopyEngines     int
	Decoders        int
	Encoders        int
	JPEGs           int
	OFAs            int
	P2P             bool
	// Instances is the most GPU instances of this profile on one GPU.
	Instances int
	// PlacementSize is the number of memory slices one instance occupies.
	PlacementSize int
	// Placements are the possible start memory slices.
	Placements []int
}

// GPUInstanceProfileByName returns the MIG profile with that name.
func (m *MIG) GPUInstanceProfileByName(name string) (*GPUInstanceProfile, bool) {
	for i := range m.GPUInstanceProfiles {
		if m.GPUInstanceProfiles[i].Name == name {
			return &m.GPUInstanceProfiles[i], true
		}
	}
	return nil, false
}

func (m *MIG) profileByID(id uint32) *GPUInstanceProfile {
	for i := range m.GPUInstanceProfiles {
		if m.GPUInstanceProfiles[i].ID == id {
			return &m.GPUInstanceProfiles[i]
		}
	}
	return nil
}

func (m *MIG) profileByNVMLIndex(idx int) *GPUInstanceProfile {
	for i := range m.GPUInstanceProfiles {
		if m.GPUInstanceProfiles[i].NVMLProfile == idx {
			return &m.GPUInstanceProfiles[i]
		}
	}
	return nil
}

// info converts the profile to NVML's structure.
func (p *GPUInstanceProfile) info() nvml.GpuInstanceProfileInfo {
	var p2p uint32
	if p.P2P {
		p2p = 1
	}
	return nvml.GpuInstanceProfileInfo{
		Id:                  p.ID,
		IsP2pSupported:      p2p,
		SliceCount:          uint32(p.Slices),
		InstanceCount:       uint32(p.Instances),
		MultiprocessorCount: uint32(p.Multiprocessors),
		CopyEngineCount:     uint32(p.CopyEngines),
		DecoderCount:        uint32(p.Decoders),
		EncoderCount:        uint32(p.Encoders),
		JpegCount:           uint32(p.JPEGs),
		OfaCount:            uint32(p.OFAs),
		MemorySizeMB:        p.MemoryMiB,
	}
}

// CUDAVersionString formats CUDADriverVersion as "<major>.<minor>".
func (p *Profile) CUDAVersionString() string {
	return fmt.Sprintf("%d.%d", p.CUDADriverVersion/1000, p.CUDADriverVersion%1000/10)
}
