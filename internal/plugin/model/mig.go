package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Partitioning says how a GPU is published.
type Partitioning string

const (
	// WholeGPU: the GPU is one device (not MIG-capable, MIG off, or a
	// MIG-capable GPU with MIG mode disabled under --mig=static).
	WholeGPU Partitioning = ""
	// StaticMIG: the GPU is in MIG mode; its existing MIG devices are
	// published, the GPU itself is not.
	StaticMIG Partitioning = "static"
	// DynamicMIG: the whole GPU and every placement of every MIG profile are
	// published, sharing the GPU's counters; MIG devices are created at
	// prepare and destroyed at unprepare.
	DynamicMIG Partitioning = "dynamic"
)

// MIGProfile is a GPU instance profile of a MIG-capable GPU, with the
// placements NVML offers for it.
type MIGProfile struct {
	// Name as nvidia-smi shows it, e.g. "1g.10gb" or "1g.10gb+me".
	Name string `json:"name"`
	// ID is the GPU instance profile ID NVML reports (19 for 1g.10gb on H100).
	ID uint32 `json:"id"`
	// NVMLProfile is the NVML_GPU_INSTANCE_PROFILE_* index used to look it up.
	NVMLProfile int `json:"nvmlProfile"`
	// Slices is the number of compute slices.
	Slices      int    `json:"slices"`
	MemoryBytes uint64 `json:"memoryBytes"`
	MIGEngines
	// Placements are the start memory slices NVML allows; each spans
	// PlacementSize memory slices.
	Placements    []int `json:"placements"`
	PlacementSize int   `json:"placementSize"`
}

// MIGEngines are the compute and engine resources of a MIG device.
type MIGEngines struct {
	Multiprocessors int `json:"multiprocessors"`
	CopyEngines     int `json:"copyEngines"`
	Decoders        int `json:"decoders"`
	Encoders        int `json:"encoders"`
	JPEGEngines     int `json:"jpegEngines"`
	OFAEngines      int `json:"ofaEngines"`
}

// MIGGeometry is the MIG layout of a MIG-capable GPU.
type MIGGeometry struct {
	// MemorySlices is the number of placement units (8 on A100/H100/H200).
	MemorySlices int `json:"memorySlices"`
	// ComputeSlices is the number of compute slices (7 on A100/H100/H200).
	ComputeSlices int `json:"computeSlices"`
	// Totals are the engines of the whole GPU in MIG mode (those of the
	// largest profile): what all MIG devices of the GPU share.
	Totals   MIGEngines   `json:"totals"`
	Profiles []MIGProfile `json:"profiles"`
}

// MIGDevice is an existing MIG device (a compute instance).
type MIGDevice struct {
	UUID string `json:"uuid"`
	// Profile, e.g. "3g.40gb", or "1c.3g.40gb" for a compute instance
	// smaller than its GPU instance.
	Profile string `json:"profile"`
	// ProfileID is the GPU instance profile ID.
	ProfileID uint32 `json:"profileID"`
	// GIID and CIID are the GPU and compute instance IDs.
	GIID int `json:"giID"`
	CIID int `json:"ciID"`
	// Start and Size are the GPU instance's placement in memory slices.
	Start       int    `json:"start"`
	Size        int    `json:"size"`
	MemoryBytes uint64 `json:"memoryBytes"`
	MIGEngines
}

// MIGNaming selects the names of a GPU's MIG devices.
type MIGNaming string

const (
	// GpudraMIGNames: gpu-<minor>-mig-<profile>-<start>.
	GpudraMIGNames MIGNaming = ""
	// NVIDIAMIGNames: NVIDIA's DRA driver's names (the compatibility mode),
	// gpu-<minor>-mig-<profile>-<profileID>-<start> with the GPU instance
	// profile ID, e.g. "gpu-0-mig-1g10gb-19-3"; its profile part is the
	// profile without dots, lower case, any other character than a-z, 0-9
	// and "-" replaced by "-" and leading and trailing "-" trimmed
	// ("1g.10gb+me" → "1g10gb-me").
	NVIDIAMIGNames MIGNaming = "nvidia"
)

// MIGDeviceName is the ResourceSlice name of the MIG device of profile
// (GPU instance profile profileID) at placement start on gpu:
// "gpu-0-mig-1g10gb-3", or NVIDIA's name when gpu.MIGNaming says so. The
// name is stable (it does not depend on instance IDs) and a DNS label:
// characters other than letters and digits are dropped from the profile
// ("1g.10gb+me" → "1g10gbme", "1g.23gb+me.all" → "1g23gbmeall"), except
// that the "-" of a profile without media extensions becomes "no"
// ("1g.23gb-me" → "1g23gbnome"), so that it differs from the "+me" profile
// of the same size.
func MIGDeviceName(gpu *GPU, profile string, profileID uint32, start int) string {
	if gpu.MIGNaming == NVIDIAMIGNames {
		return fmt.Sprintf("%s-mig-%s-%d-%d", gpu.DeviceName(), nvidiaProfilePart(profile), profileID, start)
	}
	var b strings.Builder
	for _, c := range strings.ToLower(profile) {
		switch {
		case (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'):
			b.WriteRune(c)
		case c == '-':
			b.WriteString("no")
		}
	}
	return fmt.Sprintf("%s-mig-%s-%d", gpu.DeviceName(), b.String(), start)
}

// nvidiaProfilePart is the profile part of NVIDIAMIGNames.
func nvidiaProfilePart(profile string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(strings.ReplaceAll(profile, ".", "")) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

// IsMIGDeviceName reports whether a published device name is one of
// MIGDeviceName's (whole GPUs are named gpu-<minor>).
func IsMIGDeviceName(name string) bool { return strings.Contains(name, "-mig-") }

// CounterSetName names the shared counters of a dynamically partitioned GPU.
func (g GPU) CounterSetName() string { return deviceNamePrefix + strconv.Itoa(g.Minor) + "-mig" }

// PublishesWhole reports whether the GPU itself is a published device: not
// in static MIG mode, nor a dynamic GPU whose MIG mode is fixed.
func (g GPU) PublishesWhole() bool {
	return g.Partitioning != StaticMIG && (g.Partitioning != DynamicMIG || !g.MIGModeFixed)
}

// PublishedMIGProfiles are the profiles whose placements a dynamically
// partitioned GPU publishes: those of its geometry less the unpublished ones.
func (g GPU) PublishedMIGProfiles() []MIGProfile {
	if g.MIG == nil {
		return nil
	}
	if len(g.UnpublishedMIGProfiles) == 0 {
		return g.MIG.Profiles
	}
	out := make([]MIGProfile, 0, len(g.MIG.Profiles))
	for _, p := range g.MIG.Profiles {
		if !slices.Contains(g.UnpublishedMIGProfiles, p.Name) {
			out = append(out, p)
		}
	}
	return out
}
