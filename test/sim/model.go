package sim

import (
	"fmt"
	"math/bits"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra/test/sim/models"
)

// nameRE restricts profile and model names; names double as file names.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)

const mib = 1 << 20

var brands = map[string]nvml.BrandType{
	"nvidia": nvml.BRAND_NVIDIA, "tesla": nvml.BRAND_TESLA, "quadro": nvml.BRAND_QUADRO,
	"geforce": nvml.BRAND_GEFORCE, "titan": nvml.BRAND_TITAN, "nvidia rtx": nvml.BRAND_NVIDIA_RTX,
	"quadro rtx": nvml.BRAND_QUADRO_RTX, "geforce rtx": nvml.BRAND_GEFORCE_RTX,
	"titan rtx": nvml.BRAND_TITAN_RTX, "grid": nvml.BRAND_GRID, "nvs": nvml.BRAND_NVS,
}

var architectures = map[string]nvml.DeviceArchitecture{
	"kepler": nvml.DEVICE_ARCH_KEPLER, "maxwell": nvml.DEVICE_ARCH_MAXWELL,
	"pascal": nvml.DEVICE_ARCH_PASCAL, "volta": nvml.DEVICE_ARCH_VOLTA,
	"turing": nvml.DEVICE_ARCH_TURING, "ampere": nvml.DEVICE_ARCH_AMPERE,
	"ada lovelace": nvml.DEVICE_ARCH_ADA, "ada": nvml.DEVICE_ARCH_ADA,
	"hopper": nvml.DEVICE_ARCH_HOPPER, "blackwell": nvml.DEVICE_ARCH_BLACKWELL,
}

// gpuInstanceProfiles maps the suffix of NVML_GPU_INSTANCE_PROFILE_<suffix>
// to its index.
var gpuInstanceProfiles = map[string]int{
	"1_SLICE": nvml.GPU_INSTANCE_PROFILE_1_SLICE, "2_SLICE": nvml.GPU_INSTANCE_PROFILE_2_SLICE,
	"3_SLICE": nvml.GPU_INSTANCE_PROFILE_3_SLICE, "4_SLICE": nvml.GPU_INSTANCE_PROFILE_4_SLICE,
	"7_SLICE": nvml.GPU_INSTANCE_PROFILE_7_SLICE, "8_SLICE": nvml.GPU_INSTANCE_PROFILE_8_SLICE,
	"6_SLICE": nvml.GPU_INSTANCE_PROFILE_6_SLICE, "1_SLICE_REV1": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1,
	"2_SLICE_REV1": nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, "1_SLICE_REV2": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2,
	"1_SLICE_GFX": nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, "2_SLICE_GFX": nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
	"4_SLICE_GFX": nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, "1_SLICE_NO_ME": nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME,
	"2_SLICE_NO_ME": nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, "1_SLICE_ALL_ME": nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME,
	"2_SLICE_ALL_ME": nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME,
}

// builtinModels parses the embedded catalogue once.
var builtinModels = sync.OnceValues(func() (map[string]*Model, error) {
	entries, err := models.Files.ReadDir(".")
	if err != nil {
		return nil, err
	}
	byName := map[string]*Model{}
	for _, e := range entries {
		file := path.Join("models", e.Name())
		data, err := models.Files.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		var spec modelSpec
		if err := decodeStrict(data, &spec); err != nil {
			return nil, fmt.Errorf("built-in model %s: %w", file, err)
		}
		m, err := spec.validate("")
		if err != nil {
			return nil, fmt.Errorf("built-in model %s: %w", file, err)
		}
		if _, dup := byName[m.Name]; dup {
			return nil, fmt.Errorf("built-in model %s: duplicate name %q", file, m.Name)
		}
		byName[m.Name] = m
	}
	return byName, nil
})

// BuiltinModels returns the names of the built-in GPU models, sorted.
func BuiltinModels() []string {
	byName, err := builtinModels()
	if err != nil {
		return nil
	}
	return sortedKeys(byName)
}

// join builds a field path: join("models[0]", "mig") is "models[0].mig".
func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

func (s *modelSpec) validate(at string) (*Model, error) {
	if !nameRE.MatchString(s.Name) {
		return nil, fmt.Errorf("%s: %q is not a valid model name: use lower-case letters, digits, '-' and '.'", join(at, "name"), s.Name)
	}
	m := &Model{Name: s.Name, ProductName: s.ProductName, Multiprocessors: s.Multiprocessors, BoardPartNumber: s.BoardPartNumber}
	if s.ProductName == "" || len(s.ProductName) > 95 {
		return nil, fmt.Errorf("%s: required, at most 95 characters (e.g. \"NVIDIA H100 80GB HBM3\")", join(at, "productName"))
	}
	brand := s.Brand
	if brand == "" {
		brand = "NVIDIA"
	}
	var ok bool
	if m.Brand, ok = brands[strings.ToLower(brand)]; !ok {
		return nil, fmt.Errorf("%s: unknown brand %q, known: %s", join(at, "brand"), s.Brand, strings.Join(sortedKeys(brands), ", "))
	}
	if m.Architecture, ok = architectures[strings.ToLower(s.Architecture)]; !ok {
		return nil, fmt.Errorf("%s: unknown architecture %q, known: %s", join(at, "architecture"), s.Architecture, strings.Join(sortedKeys(architectures), ", "))
	}
	var err error
	if m.ComputeCapabilityMajor, m.ComputeCapabilityMinor, err = parseMajorMinor(string(s.ComputeCapability)); err != nil {
		return nil, fmt.Errorf("%s: %w (e.g. \"9.0\")", join(at, "computeCapability"), err)
	}
	if m.MemoryBytes, err = parseMemory(s.Memory); err != nil {
		return nil, fmt.Errorf("%s: %w", join(at, "memory"), err)
	}
	if s.Multiprocessors < 0 {
		return nil, fmt.Errorf("%s: must not be negative", join(at, "multiprocessors"))
	}
	if m.PCIDeviceID, err = parseUint32(s.PCIDeviceID, true); err != nil {
		return nil, fmt.Errorf("%s: %w (e.g. \"0x233010DE\": device ID 0x2330, vendor 0x10DE)", join(at, "pciDeviceID"), err)
	}
	if m.PCISubsystemID, err = parseUint32(s.PCISubsystemID, false); err != nil {
		return nil, fmt.Errorf("%s: %w", join(at, "pciSubsystemID"), err)
	}
	if m.Power, err = powerRange(at, s.IdlePowerWatts, s.PowerLimitWatts); err != nil {
		return nil, err
	}
	if m.SMClock, err = clockRange(at, s.IdleSMClockMHz, s.MaxSMClockMHz); err != nil {
		return nil, err
	}
	if s.ECCEnabled != nil {
		m.ECC, m.ECCDefault = true, *s.ECCEnabled
	}
	switch {
	case s.MIGCapable && s.MIG == nil:
		return nil, fmt.Errorf("%s: required when migCapable is true", join(at, "mig"))
	case !s.MIGCapable && s.MIG != nil:
		return nil, fmt.Errorf("%s: only allowed when migCapable is true", join(at, "mig"))
	case s.MIG != nil:
		if m.MIG, err = s.MIG.validate(join(at, "mig"), m); err != nil {
			return nil, err
		}
	}
	if m.NVML, err = s.NVML.validate(join(at, "nvml"), m.Architecture, m.MIG); err != nil {
		return nil, err
	}
	return m, nil
}

// powerRange checks idlePowerWatts and powerLimitWatts: both or neither,
// 0 < idle < limit.
func powerRange(at string, idle, limit int) (*PowerRange, error) {
	if idle == 0 && limit == 0 {
		return nil, nil
	}
	if idle <= 0 || limit <= idle || limit > 5000 {
		return nil, fmt.Errorf("%s, %s: set both, with 0 < idle < limit <= 5000 (e.g. 70 and 700 for an H100 SXM)",
			join(at, "idlePowerWatts"), join(at, "powerLimitWatts"))
	}
	return &PowerRange{IdleWatts: idle, LimitWatts: limit}, nil
}

// clockRange checks idleSMClockMHz and maxSMClockMHz: both or neither,
// 0 < idle < max.
func clockRange(at string, idle, maxMHz int) (*ClockRange, error) {
	if idle == 0 && maxMHz == 0 {
		return nil, nil
	}
	if idle <= 0 || maxMHz <= idle || maxMHz > 10000 {
		return nil, fmt.Errorf("%s, %s: set both, with 0 < idle < max <= 10000 (e.g. 345 and 1980 for an H100 SXM)",
			join(at, "idleSMClockMHz"), join(at, "maxSMClockMHz"))
	}
	return &ClockRange{IdleMHz: idle, MaxMHz: maxMHz}, nil
}

func (s *migSpec) validate(at string, m *Model) (*MIG, error) {
	if s.MemorySlices < 1 || s.MemorySlices > 64 || bits.OnesCount(uint(s.MemorySlices)) != 1 {
		return nil, fmt.Errorf("%s: must be a power of two (8 on A100, H100 and H200)", join(at, "memorySlices"))
	}
	if len(s.GPUInstanceProfiles) == 0 {
		return nil, fmt.Errorf("%s: list at least one GPU instance profile", join(at, "gpuInstanceProfiles"))
	}
	mig := &MIG{MemorySlices: s.MemorySlices}
	smallest := 0
	for i := range s.GPUInstanceProfiles {
		p, err := s.GPUInstanceProfiles[i].validate(fmt.Sprintf("%s[%d]", join(at, "gpuInstanceProfiles"), i), mig.MemorySlices, m.MemoryBytes)
		if err != nil {
			return nil, err
		}
		for _, q := range mig.GPUInstanceProfiles {
			if q.Name == p.Name || q.NVMLProfile == p.NVMLProfile || q.ID == p.ID {
				return nil, fmt.Errorf("%s[%d]: name, nvmlProfile and id must be unique, but %q repeats one of %q", join(at, "gpuInstanceProfiles"), i, p.Name, q.Name)
			}
		}
		mig.ComputeSlices = max(mig.ComputeSlices, p.Slices)
		if p.Slices == 1 && (smallest == 0 || p.Multiprocessors < smallest) {
			smallest = p.Multiprocessors
		}
		mig.GPUInstanceProfiles = append(mig.GPUInstanceProfiles, *p)
	}
	slices.SortFunc(mig.GPUInstanceProfiles, func(a, b GPUInstanceProfile) int { return a.NVMLProfile - b.NVMLProfile })
	mig.MaxDevices = s.MaxDevices
	if mig.MaxDevices == 0 {
		mig.MaxDevices = mig.ComputeSlices
	}
	if mig.MaxDevices < 0 {
		return nil, fmt.Errorf("%s: must not be negative", join(at, "maxDevices"))
	}
	mig.MultiprocessorsPerSlice = s.MultiprocessorsPerSlice
	if mig.MultiprocessorsPerSlice == 0 {
		mig.MultiprocessorsPerSlice = smallest
	}
	return mig, nil
}

func (s *gpuInstanceProfSpec) validate(at string, memorySlices int, total uint64) (*GPUInstanceProfile, error) {
	p := &GPUInstanceProfile{
		Name: s.Name, Slices: s.Slices, Multiprocessors: s.Multiprocessors, CopyEngines: s.CopyEngines,
		Decoders: s.Decoders, Encoders: s.Encoders, JPEGs: s.JPEGs, OFAs: s.OFAs, P2P: s.P2P,
		Instances: s.Instances, PlacementSize: s.PlacementSize, Placements: slices.Clone(s.Placements),
	}
	if s.Name == "" {
		return nil, fmt.Errorf("%s: required (e.g. \"1g.10gb\")", join(at, "name"))
	}
	idx, err := parseGPUInstanceProfile(string(s.NVMLProfile))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", join(at, "nvmlProfile"), err)
	}
	p.NVMLProfile = idx
	if s.ID == nil || *s.ID < 0 {
		return nil, fmt.Errorf("%s: required: the profile ID nvidia-smi mig -lgip shows (19 for 1g.10gb on H100)", join(at, "id"))
	}
	p.ID = uint32(*s.ID)
	if s.Slices < 1 || s.Slices > 8 {
		return nil, fmt.Errorf("%s: must be between 1 and 8", join(at, "slices"))
	}
	bytes, err := parseMemory(s.Memory)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", join(at, "memory"), err)
	}
	if bytes > total || bytes < mib {
		return nil, fmt.Errorf("%s: must be between 1Mi and the memory of the GPU", join(at, "memory"))
	}
	p.MemoryMiB = bytes / mib
	for _, n := range []int{s.Multiprocessors, s.CopyEngines, s.Decoders, s.Encoders, s.JPEGs, s.OFAs} {
		if n < 0 {
			return nil, fmt.Errorf("%s: engine and multiprocessor counts must not be negative", at)
		}
	}
	size := s.PlacementSize
	if size < 1 || size > memorySlices || bits.OnesCount(uint(size)) != 1 {
		return nil, fmt.Errorf("%s: must be a power of two no larger than memorySlices (%d)", join(at, "placementSize"), memorySlices)
	}
	if len(s.Placements) == 0 {
		return nil, fmt.Errorf("%s: list the possible start slices (e.g. [0, 4])", join(at, "placements"))
	}
	for j, start := range s.Placements {
		if start < 0 || start%size != 0 || start+size > memorySlices || slices.Index(s.Placements, start) != j {
			return nil, fmt.Errorf("%s[%d]: start %d must be a unique multiple of placementSize (%d) with start+placementSize <= memorySlices (%d)",
				join(at, "placements"), j, start, size, memorySlices)
		}
	}
	if p.Instances == 0 {
		p.Instances = len(p.Placements)
	}
	if p.Instances < 0 || p.Instances > len(p.Placements) {
		return nil, fmt.Errorf("%s: must be between 1 and the number of placements (%d)", join(at, "instances"), len(p.Placements))
	}
	return p, nil
}

func parseGPUInstanceProfile(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < nvml.GPU_INSTANCE_PROFILE_COUNT {
		return n, nil
	}
	if idx, ok := gpuInstanceProfiles[strings.TrimPrefix(strings.ToUpper(s), "GPU_INSTANCE_PROFILE_")]; ok {
		return idx, nil
	}
	return 0, fmt.Errorf("unknown NVML GPU instance profile %q, known: %s", s, strings.Join(sortedKeys(gpuInstanceProfiles), ", "))
}

// parseMajorMinor parses "9.0"; a bare "9" (YAML number 9.0) means "9.0".
func parseMajorMinor(s string) (int, int, error) {
	majStr, minStr, found := strings.Cut(s, ".")
	if !found {
		minStr = "0"
	}
	maj, err1 := strconv.Atoi(majStr)
	mnr, err2 := strconv.Atoi(minStr)
	if err1 != nil || err2 != nil || maj < 0 || mnr < 0 || mnr > 9 {
		return 0, 0, fmt.Errorf("%q is not a <major>.<minor> version", s)
	}
	return maj, mnr, nil
}

// parseMemory accepts a byte count or a Kubernetes quantity such as "80Gi".
func parseMemory(s scalar) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("required: bytes or a quantity such as 80Gi or 81920Mi")
	}
	q, err := resource.ParseQuantity(string(s))
	if err != nil || q.Sign() <= 0 || q.MilliValue()%1000 != 0 {
		return 0, fmt.Errorf("%q is not a valid memory size: write bytes or a binary quantity such as 80Gi or 81920Mi (not \"80GB\")", string(s))
	}
	return uint64(q.Value()), nil
}

// parseUint32 accepts "0x..." hex or a decimal number (YAML turns an
// unquoted 0x233010DE into a decimal).
func parseUint32(s scalar, required bool) (uint32, error) {
	if s == "" {
		if required {
			return 0, fmt.Errorf("required")
		}
		return 0, nil
	}
	str := strings.ToLower(string(s))
	var v uint64
	var err error
	if hex, ok := strings.CutPrefix(str, "0x"); ok {
		v, err = strconv.ParseUint(hex, 16, 32)
	} else {
		v, err = strconv.ParseUint(str, 10, 32)
	}
	if err != nil {
		return 0, fmt.Errorf("%q is not a 32-bit number", string(s))
	}
	return uint32(v), nil
}
