// Package mig manages NVIDIA Multi-Instance GPU devices through go-nvml: it
// reads a GPU's MIG profiles and placements, lists existing MIG devices,
// creates and destroys GPU and compute instances, and decides per GPU how
// it is published (whole, static MIG, dynamic MIG). It only uses
// nvml.Interface, so real GPUs and the simulator (test/sim) take the
// same code path.
package mig

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// Geometry reads the GPU instance profiles of a MIG-capable GPU and their
// placements. totalMemory is the GPU's memory (it names the profiles).
func Geometry(dev nvml.Device, totalMemory uint64) (*model.MIGGeometry, error) {
	g := &model.MIGGeometry{}
	for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
		info, ret := dev.GetGpuInstanceProfileInfo(idx)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue // the GPU has no such profile
		default:
			return nil, fmt.Errorf("NVML get GPU instance profile %d: %w", idx, ret)
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue // listed, but not placeable on this GPU or driver: skipped, as NVIDIA's driver does
		default:
			return nil, fmt.Errorf("NVML get placements of GPU instance profile %d: %w", info.Id, ret)
		}
		p := model.MIGProfile{
			Name:        ProfileName(idx, int(info.SliceCount), info.MemorySizeMB, totalMemory),
			ID:          info.Id,
			NVMLProfile: idx,
			Slices:      int(info.SliceCount),
			MemoryBytes: info.MemorySizeMB << 20,
			MIGEngines: model.MIGEngines{
				Multiprocessors: int(info.MultiprocessorCount), CopyEngines: int(info.CopyEngineCount),
				Decoders: int(info.DecoderCount), Encoders: int(info.EncoderCount),
				JPEGEngines: int(info.JpegCount), OFAEngines: int(info.OfaCount),
			},
		}
		for _, pl := range placements {
			p.Placements = append(p.Placements, int(pl.Start))
			p.PlacementSize = int(pl.Size)
			g.MemorySlices = max(g.MemorySlices, int(pl.Start+pl.Size))
		}
		slices.Sort(p.Placements)
		if p.Slices > g.ComputeSlices {
			g.ComputeSlices = p.Slices
			g.Totals = p.MIGEngines
		}
		g.Profiles = append(g.Profiles, p)
	}
	if len(g.Profiles) == 0 {
		return nil, fmt.Errorf("NVML reports MIG support but no GPU instance profile")
	}
	return g, nil
}

// ProfileName names a GPU instance profile the way nvidia-smi and go-nvlib
// (pkg/nvlib/device MigProfileInfo.String) do: "<slices>g.<memory>gb",
// memory rounded up to eighths of the GPU and scaled to the GPU's memory in
// whole GiB, plus the suffix of the profile's variant (profileSuffix).
func ProfileName(nvmlProfile, slices int, memoryMiB, totalMemory uint64) string {
	totalGiB := math.Ceil(float64(totalMemory) / (1 << 30))
	eighths := math.Ceil(float64(memoryMiB<<20) / float64(totalMemory) * 8)
	return fmt.Sprintf("%dg.%dgb", slices, int(math.Round(eighths/8*totalGiB))) + profileSuffix[nvmlProfile]
}

// profileSuffix names the variants of NVML's GPU instance profile indices
// as go-nvlib does: REV1 has the media extensions ("+me"), ALL_ME all of
// them ("+me.all"), GFX graphics ("+gfx"), NO_ME none ("-me"). REV2 (a
// 1-slice profile with two memory slices) and the plain indices have none;
// the memory in the name tells REV2 apart.
var profileSuffix = map[int]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: "+me.all",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: "+me.all",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:  "-me",
}

// Devices lists the MIG devices that exist on a GPU in MIG mode.
func Devices(dev nvml.Device, geo *model.MIGGeometry) ([]model.MIGDevice, error) {
	count, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML get max MIG device count: %w", ret)
	}
	var out []model.MIGDevice
	for i := 0; i < count; i++ {
		m, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML get MIG device %d: %w", i, ret)
		}
		d, err := describe(dev, m, geo)
		if err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		out = append(out, d)
	}
	return out, nil
}

func describe(parent, m nvml.Device, geo *model.MIGGeometry) (model.MIGDevice, error) {
	var d model.MIGDevice
	var ret nvml.Return
	if d.UUID, ret = m.GetUUID(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("NVML get UUID: %w", ret)
	}
	if d.GIID, ret = m.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("NVML get GPU instance ID: %w", ret)
	}
	if d.CIID, ret = m.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("NVML get compute instance ID: %w", ret)
	}
	attrs, ret := m.GetAttributes()
	if ret != nvml.SUCCESS {
		return d, fmt.Errorf("NVML get attributes: %w", ret)
	}
	gi, ret := parent.GetGpuInstanceById(d.GIID)
	if ret != nvml.SUCCESS {
		return d, fmt.Errorf("NVML get GPU instance %d: %w", d.GIID, ret)
	}
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return d, fmt.Errorf("NVML get info of GPU instance %d: %w", d.GIID, ret)
	}
	d.ProfileID = info.ProfileId
	d.Start, d.Size = int(info.Placement.Start), int(info.Placement.Size)
	d.MemoryBytes = attrs.MemorySizeMB << 20
	d.MIGEngines = model.MIGEngines{
		Multiprocessors: int(attrs.MultiprocessorCount), CopyEngines: int(attrs.SharedCopyEngineCount),
		Decoders: int(attrs.SharedDecoderCount), Encoders: int(attrs.SharedEncoderCount),
		JPEGEngines: int(attrs.SharedJpegCount), OFAEngines: int(attrs.SharedOfaCount),
	}
	p := ProfileByID(geo, d.ProfileID)
	if p == nil {
		return d, fmt.Errorf("GPU instance %d has profile ID %d, which the GPU does not list", d.GIID, d.ProfileID)
	}
	d.Profile = p.Name
	if attrs.ComputeInstanceSliceCount < attrs.GpuInstanceSliceCount {
		d.Profile = fmt.Sprintf("%dc.%s", attrs.ComputeInstanceSliceCount, p.Name)
	}
	return d, nil
}

// ProfileByID finds a profile of the geometry.
func ProfileByID(geo *model.MIGGeometry, id uint32) *model.MIGProfile {
	for i := range geo.Profiles {
		if geo.Profiles[i].ID == id {
			return &geo.Profiles[i]
		}
	}
	return nil
}

// Mode is the node-wide MIG setting (--mig).
type Mode string

const (
	// ModeOff publishes every GPU whole, whatever its MIG mode.
	ModeOff Mode = "off"
	// ModeStatic publishes the existing MIG devices of GPUs in MIG mode and
	// never changes the GPUs' MIG configuration.
	ModeStatic Mode = "static"
	// ModeDynamic publishes MIG-capable GPUs as partitionable devices and
	// creates MIG devices on demand.
	ModeDynamic Mode = "dynamic"
)

// ParseMode checks a --mig value; empty means the default, static.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeStatic, nil
	case ModeOff, ModeStatic, ModeDynamic:
		return m, nil
	}
	return "", fmt.Errorf("--mig=%q: must be off, static or dynamic", s)
}

// Apply decides per GPU how it is published under mode: GPUs without MIG
// are always whole (an L4 on a --mig=dynamic node is simply a GPU). A GPU
// whose MIG mode only changes with a reset (Ampere, see
// ToggleWithoutReset) is dynamic only while MIG mode is on, and then
// without its whole device (model.GPU.MIGModeFixed), as NVIDIA's DRA
// driver does; with MIG mode off it stays whole.
func Apply(node *model.Node, mode Mode) {
	for i := range node.GPUs {
		g := &node.GPUs[i]
		g.MIGModeFixed = false
		switch {
		case g.MIG == nil || mode == ModeOff:
			g.Partitioning = model.WholeGPU
		case mode == ModeDynamic && !ToggleWithoutReset(g.Architecture):
			if g.MIGEnabled {
				g.Partitioning, g.MIGModeFixed = model.DynamicMIG, true
			} else {
				g.Partitioning = model.WholeGPU
			}
		case mode == ModeDynamic:
			g.Partitioning = model.DynamicMIG
		case g.MIGEnabled:
			g.Partitioning = model.StaticMIG
		default:
			g.Partitioning = model.WholeGPU
		}
	}
}

// ToggleWithoutReset reports whether a GPU of the architecture (as
// internal/plugin/discovery names it) switches MIG mode without a GPU
// reset: Hopper and later do, Ampere does not (nvml.h: SetMigMode "may
// unbind or reset the device"; NVIDIA's DRA driver: architecture >= Hopper).
// An architecture this version cannot name counts as needing a reset.
func ToggleWithoutReset(architecture string) bool {
	return architecture == "Hopper" || architecture == "Blackwell"
}

// errNotFound reports NVML's NOT_FOUND (or INVALID_ARGUMENT on a handle that
// is gone) as "already gone".
func gone(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT
}

// ErrOccupied marks a placement that is taken on the GPU.
var ErrOccupied = errors.New("MIG placement is occupied")
