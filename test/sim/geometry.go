package sim

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// This file holds the pure MIG placement rules, shared by profile validation
// (migDevices must fit) and the simulated server.
//
// GPU instances: a placement is a range of memory slices [start, start+size).
// An instance fits if its start is one of the profile's placements, it does
// not overlap another instance, the sum of compute slices stays within the
// GPU's compute slices, and the profile's instance limit is not reached.
// GPU instance IDs follow NVML's numbering of the placement tree: the
// full-GPU placement is 0, the two halves 1-2, the quarters 3-6, the
// eighths 7-14 (on 8 memory slices).
//
// Compute instances are derived from their GPU instance profile: a GPU
// instance of S compute slices offers compute instances of S slices and of
// every c slices with 2c <= S+1 (1c to 4c in a 7g instance, 1c and 2c in 3g
// and 4g instances), matching NVIDIA's MIG user guide for A100, H100 and
// H200 and the rule go-nvlib applies.

// giSlot is a placed GPU instance.
type giSlot struct {
	prof  *GPUInstanceProfile
	start int
}

// checkPlacement says whether p can be placed at start next to existing.
func checkPlacement(m *MIG, existing []giSlot, p *GPUInstanceProfile, start int) nvml.Return {
	if !slices.Contains(p.Placements, start) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	same, computeSlices := 0, p.Slices
	for _, e := range existing {
		if e.prof.ID == p.ID {
			same++
		}
		computeSlices += e.prof.Slices
		if start < e.start+e.prof.PlacementSize && e.start < start+p.PlacementSize {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	if same >= p.Instances || computeSlices > m.ComputeSlices {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return nvml.SUCCESS
}

// autoPlacement returns the placement CreateGpuInstance picks: like NVML,
// the highest free one (two 3g.40gb created in a row get IDs 2, then 1).
func autoPlacement(m *MIG, existing []giSlot, p *GPUInstanceProfile) (int, nvml.Return) {
	starts := slices.Sorted(slices.Values(p.Placements))
	slices.Reverse(starts)
	for _, start := range starts {
		if checkPlacement(m, existing, p, start) == nvml.SUCCESS {
			return start, nvml.SUCCESS
		}
	}
	return 0, nvml.ERROR_INSUFFICIENT_RESOURCES
}

// remainingCapacity counts how many more instances of p fit. Placements of
// one profile have equal, aligned sizes, so filling them in order is optimal.
func remainingCapacity(m *MIG, existing []giSlot, p *GPUInstanceProfile) int {
	placed := slices.Clone(existing)
	n := 0
	for {
		start, ret := autoPlacement(m, placed, p)
		if ret != nvml.SUCCESS {
			return n
		}
		placed = append(placed, giSlot{prof: p, start: start})
		n++
	}
}

// gpuInstanceID numbers placements like NVML does (see the file comment).
func gpuInstanceID(m *MIG, p *GPUInstanceProfile, start int) uint32 {
	return uint32(m.MemorySlices/p.PlacementSize - 1 + start/p.PlacementSize)
}

// ciProfile is a compute instance profile of one GPU instance profile.
type ciProfile struct {
	nvmlProfile     int // NVML_COMPUTE_INSTANCE_PROFILE_*; also the reported ID
	slices          int
	multiprocessors int
	placements      []int
}

var ciProfileSlices = map[int]int{
	nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: 1, nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
	nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: 3, nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
	nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE: 6, nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
	nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE: 8,
}

// computeProfile returns the compute instance profile with the given NVML
// index inside a GPU instance of profile gi, or false if it does not exist.
func computeProfile(m *MIG, gi *GPUInstanceProfile, nvmlProfile int) (ciProfile, bool) {
	c, ok := ciProfileSlices[nvmlProfile]
	s := gi.Slices
	if !ok || c > s || (c < s && 2*c > s+1) {
		return ciProfile{}, false
	}
	cp := ciProfile{nvmlProfile: nvmlProfile, slices: c, multiprocessors: gi.Multiprocessors}
	if c < s {
		perSlice := m.MultiprocessorsPerSlice
		if perSlice == 0 {
			perSlice = gi.Multiprocessors / s
		}
		cp.multiprocessors = min(gi.Multiprocessors, c*perSlice)
	}
	step := c
	if c == 3 && s >= 7 {
		step = 4
	}
	for start := 0; start+c <= s; start += step {
		cp.placements = append(cp.placements, start)
	}
	return cp, true
}

func (cp ciProfile) info(gi *GPUInstanceProfile) nvml.ComputeInstanceProfileInfo {
	return nvml.ComputeInstanceProfileInfo{
		Id:                    uint32(cp.nvmlProfile),
		SliceCount:            uint32(cp.slices),
		InstanceCount:         uint32(len(cp.placements)),
		MultiprocessorCount:   uint32(cp.multiprocessors),
		SharedCopyEngineCount: uint32(gi.CopyEngines),
		SharedDecoderCount:    uint32(gi.Decoders),
		SharedEncoderCount:    uint32(gi.Encoders),
		SharedJpegCount:       uint32(gi.JPEGs),
		SharedOfaCount:        uint32(gi.OFAs),
	}
}

// ciSlot is a placed compute instance inside a GPU instance.
type ciSlot struct {
	slices, start int
}

// checkCIPlacement says whether cp can be placed at start next to existing.
func checkCIPlacement(existing []ciSlot, cp ciProfile, start int) nvml.Return {
	if !slices.Contains(cp.placements, start) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for _, e := range existing {
		if start < e.start+e.slices && e.start < start+cp.slices {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	return nvml.SUCCESS
}

func firstFreeCIPlacement(existing []ciSlot, cp ciProfile) (int, nvml.Return) {
	for _, start := range cp.placements {
		if checkCIPlacement(existing, cp, start) == nvml.SUCCESS {
			return start, nvml.SUCCESS
		}
	}
	return 0, nvml.ERROR_INSUFFICIENT_RESOURCES
}

func remainingCICapacity(existing []ciSlot, cp ciProfile) int {
	placed := slices.Clone(existing)
	n := 0
	for {
		start, ret := firstFreeCIPlacement(placed, cp)
		if ret != nvml.SUCCESS {
			return n
		}
		placed = append(placed, ciSlot{slices: cp.slices, start: start})
		n++
	}
}
