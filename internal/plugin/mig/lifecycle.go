package mig

import (
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// Instance is a MIG device on a GPU: one GPU instance with the compute
// instance that spans it.
type Instance struct {
	ParentUUID string `json:"parentUUID"`
	ProfileID  uint32 `json:"profileID"`
	Start      int    `json:"start"`
	Size       int    `json:"size"`
	GIID       int    `json:"giID"`
	CIID       int    `json:"ciID"`
	UUID       string `json:"uuid"`
}

// Manager creates, lists and destroys MIG devices. It keeps no state: NVML
// is the source of truth, so two plugin processes (a rolling update) may
// use it side by side as long as they serialize per GPU (internal/plugin/prepare's
// per-device locks do).
type Manager struct {
	lib nvml.Interface
}

// NewManager works on an initialized NVML library.
func NewManager(lib nvml.Interface) *Manager { return &Manager{lib: lib} }

func (m *Manager) device(parentUUID string) (nvml.Device, error) {
	dev, ret := m.lib.DeviceGetHandleByUUID(parentUUID)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML get GPU %s: %w", parentUUID, ret)
	}
	return dev, nil
}

// Create creates a GPU instance of profile p at placement start on the GPU,
// and a compute instance spanning it. MIG mode is enabled first if needed
// (the caller makes sure the GPU is not in use as a whole). ErrOccupied
// means the placement overlaps an existing instance.
func (m *Manager) Create(parentUUID string, p model.MIGProfile, start int) (Instance, error) {
	inst := Instance{ParentUUID: parentUUID, ProfileID: p.ID, Start: start, Size: p.PlacementSize}
	dev, err := m.device(parentUUID)
	if err != nil {
		return inst, err
	}
	if err := setMode(dev, nvml.DEVICE_MIG_ENABLE); err != nil {
		return inst, err
	}
	info, ret := dev.GetGpuInstanceProfileInfo(p.NVMLProfile)
	if ret != nvml.SUCCESS {
		return inst, fmt.Errorf("NVML get GPU instance profile %s: %w", p.Name, ret)
	}
	if info.Id != p.ID {
		return inst, fmt.Errorf("GPU instance profile %s: NVML reports ID %d, the published device says %d; restart the plugin to republish", p.Name, info.Id, p.ID)
	}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.PlacementSize)})
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		return inst, fmt.Errorf("create GPU instance %s at slice %d on %s: %w (NVML: %w)", p.Name, start, parentUUID, ErrOccupied, ret)
	default:
		return inst, fmt.Errorf("NVML create GPU instance %s at slice %d on %s: %w", p.Name, start, parentUUID, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return inst, errors.Join(fmt.Errorf("NVML get GPU instance info: %w", ret), destroyGI(gi))
	}
	inst.GIID = int(giInfo.Id)
	ciProfile, ok := fullComputeProfile[p.Slices]
	if !ok {
		return inst, errors.Join(fmt.Errorf("no compute instance profile spans %d slices", p.Slices), destroyGI(gi))
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return inst, errors.Join(fmt.Errorf("NVML get compute instance profile: %w", ret), destroyGI(gi))
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return inst, errors.Join(fmt.Errorf("NVML create compute instance in GPU instance %d: %w", inst.GIID, ret), destroyGI(gi))
	}
	ciI, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return inst, errors.Join(fmt.Errorf("NVML get compute instance info: %w", ret), destroyGI(gi))
	}
	inst.CIID = int(ciI.Id)
	uuids, err := migUUIDs(dev)
	if err != nil {
		return inst, errors.Join(err, destroyGI(gi))
	}
	inst.UUID = uuids[[2]int{inst.GIID, inst.CIID}]
	if inst.UUID == "" {
		return inst, errors.Join(fmt.Errorf("NVML lists no MIG device for GPU instance %d, compute instance %d", inst.GIID, inst.CIID), destroyGI(gi))
	}
	return inst, nil
}

// fullComputeProfile maps a slice count to the compute instance profile
// that spans a GPU instance of that many slices.
var fullComputeProfile = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// ErrReplaced marks a MIG device that is gone while another one holds its
// GPU instance ID: NVML hands a free ID to the next instance created.
var ErrReplaced = errors.New("the GPU instance ID now belongs to another MIG device")

// ErrGPUNeedsReset marks a MIG device that cannot be destroyed because its
// GPU is lost (ERROR_GPU_IS_LOST), needs a reset (ERROR_RESET_REQUIRED) or
// is no longer found by its UUID (ERROR_NOT_FOUND: unbound from the
// driver). The reset or re-bind such a GPU needs destroys its GPU and
// compute instances, so the caller may count the device as gone.
var ErrGPUNeedsReset = errors.New("the GPU is lost or needs a reset, which destroys its MIG devices")

// needsReset reports an NVML answer that only a GPU reset ends.
func needsReset(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_RESET_REQUIRED
}

// Destroy removes the MIG device inst (its GPU instance and compute
// instances) from the GPU. The GPU instance is looked up by ID and must
// still be inst: the same profile, placement and MIG device UUID (an inst
// without UUID stands for a GPU instance without compute instance). A
// device already gone is not an error; if its ID now names another one,
// that one is left alone and the error wraps ErrReplaced. A GPU that is
// lost, needs a reset or is not found makes the error wrap
// ErrGPUNeedsReset (and the NVML code).
func (m *Manager) Destroy(inst Instance) error {
	dev, ret := m.lib.DeviceGetHandleByUUID(inst.ParentUUID)
	switch {
	case needsReset(ret) || ret == nvml.ERROR_NOT_FOUND:
		return fmt.Errorf("NVML get GPU %s: %w: %w", inst.ParentUUID, ErrGPUNeedsReset, ret)
	case ret != nvml.SUCCESS:
		return fmt.Errorf("NVML get GPU %s: %w", inst.ParentUUID, ret)
	}
	gi, ret := dev.GetGpuInstanceById(inst.GIID)
	switch {
	case gone(ret) || ret == nvml.ERROR_NOT_SUPPORTED:
		return nil // no such instance, or MIG mode off: nothing to destroy
	case needsReset(ret):
		return fmt.Errorf("NVML get GPU instance %d of %s: %w: %w", inst.GIID, inst.ParentUUID, ErrGPUNeedsReset, ret)
	case ret != nvml.SUCCESS:
		return fmt.Errorf("NVML get GPU instance %d of %s: %w", inst.GIID, inst.ParentUUID, ret)
	}
	if err := sameInstance(dev, gi, inst); err != nil {
		return fmt.Errorf("MIG device %s (GPU instance %d of %s): %w", inst.UUID, inst.GIID, inst.ParentUUID, resetErr(err))
	}
	if err := destroyGI(gi); err != nil {
		return fmt.Errorf("destroy GPU instance %d of %s: %w", inst.GIID, inst.ParentUUID, resetErr(err))
	}
	return nil
}

// resetErr adds ErrGPUNeedsReset to an error that carries an NVML code
// only a reset ends.
func resetErr(err error) error {
	if errors.Is(err, nvml.ERROR_GPU_IS_LOST) || errors.Is(err, nvml.ERROR_RESET_REQUIRED) {
		return fmt.Errorf("%w: %w", ErrGPUNeedsReset, err)
	}
	return err
}

// sameInstance checks that gi is inst, or says what differs (ErrReplaced).
func sameInstance(dev nvml.Device, gi nvml.GpuInstance, inst Instance) error {
	info, ret := gi.GetInfo()
	if gone(ret) {
		return nil // destroyed meanwhile: destroyGI finds nothing either
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML get GPU instance info: %w", ret)
	}
	if info.ProfileId != inst.ProfileID || int(info.Placement.Start) != inst.Start || int(info.Placement.Size) != inst.Size {
		return fmt.Errorf("%w: profile ID %d at memory slices %d+%d, not profile ID %d at %d+%d", ErrReplaced,
			info.ProfileId, info.Placement.Start, info.Placement.Size, inst.ProfileID, inst.Start, inst.Size)
	}
	uuids, err := migUUIDs(dev)
	if err != nil {
		return err
	}
	var live []string
	for key, u := range uuids {
		if key[0] == inst.GIID {
			if u == inst.UUID {
				return nil
			}
			live = append(live, u)
		}
	}
	if inst.UUID == "" && len(live) == 0 {
		return nil
	}
	slices.Sort(live)
	return fmt.Errorf("%w: it holds MIG device(s) %v", ErrReplaced, live)
}

// destroyGI destroys every compute instance of gi, then gi.
func destroyGI(gi nvml.GpuInstance) error {
	for idx := 0; idx < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; idx++ {
		info, ret := gi.GetComputeInstanceProfileInfo(idx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			continue
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS && !gone(ret) {
				return fmt.Errorf("NVML destroy compute instance: %w", ret)
			}
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS && !gone(ret) {
		return fmt.Errorf("NVML destroy GPU instance: %w", ret)
	}
	return nil
}

// Instances lists the GPU instances of a GPU (none when MIG mode is off),
// each with its first compute instance and MIG device UUID.
func (m *Manager) Instances(parentUUID string, geo *model.MIGGeometry) ([]Instance, error) {
	dev, err := m.device(parentUUID)
	if err != nil {
		return nil, err
	}
	mode, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML get MIG mode of %s: %w", parentUUID, ret)
	}
	if mode != nvml.DEVICE_MIG_ENABLE {
		return nil, nil
	}
	uuids, err := migUUIDs(dev)
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, p := range geo.Profiles {
		info, ret := dev.GetGpuInstanceProfileInfo(p.NVMLProfile)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML get GPU instance profile %s: %w", p.Name, ret)
		}
		gis, ret := dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML list GPU instances of profile %s: %w", p.Name, ret)
		}
		for _, gi := range gis {
			gInfo, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				continue // destroyed meanwhile
			}
			inst := Instance{ParentUUID: parentUUID, ProfileID: gInfo.ProfileId, GIID: int(gInfo.Id),
				Start: int(gInfo.Placement.Start), Size: int(gInfo.Placement.Size), CIID: -1}
			for key, u := range uuids {
				if key[0] == inst.GIID && (inst.CIID < 0 || key[1] < inst.CIID) {
					inst.CIID, inst.UUID = key[1], u
				}
			}
			out = append(out, inst)
		}
	}
	return out, nil
}

// ReleaseForWholeGPU makes a dynamically partitioned GPU usable as a whole:
// it fails with ErrOccupied while MIG devices exist, and turns MIG mode off.
func (m *Manager) ReleaseForWholeGPU(parentUUID string, geo *model.MIGGeometry) error {
	insts, err := m.Instances(parentUUID, geo)
	if err != nil {
		return err
	}
	if len(insts) > 0 {
		return fmt.Errorf("GPU %s has %d MIG device(s) (first: GPU instance %d, %s): %w", parentUUID, len(insts), insts[0].GIID, insts[0].UUID, ErrOccupied)
	}
	dev, err := m.device(parentUUID)
	if err != nil {
		return err
	}
	return setMode(dev, nvml.DEVICE_MIG_DISABLE)
}

// ErrModePending marks a MIG mode change that waits for a GPU reset.
var ErrModePending = errors.New("the MIG mode change is pending until the GPU is reset")

// setMode switches MIG mode if it differs. On Hopper and later the switch
// needs no GPU reset. On Ampere it does, and NVML may leave the new mode
// pending (GetMigMode's second value) until one: MIG mode is never turned
// off there (the plugin does not publish such a GPU whole, see Apply), and
// a mode that is only pending is an error wrapping ErrModePending, so that
// no GPU instance is created on a GPU still out of MIG mode.
func setMode(dev nvml.Device, mode int) error {
	cur, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML get MIG mode: %w", ret)
	}
	if cur == mode {
		return nil
	}
	if mode == nvml.DEVICE_MIG_DISABLE {
		if arch, ret := dev.GetArchitecture(); ret != nvml.SUCCESS || arch < nvml.DEVICE_ARCH_HOPPER || arch == nvml.DEVICE_ARCH_UNKNOWN {
			return fmt.Errorf("MIG mode is not turned off on a GPU that needs a reset to turn it on again (architecture %d): %w", arch, ErrModePending)
		}
	}
	// go-nvml returns the activation status first.
	activation, ret := dev.SetMigMode(mode)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML set MIG mode to %d: %w", mode, ret)
	}
	cur, pending, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML get MIG mode after setting it to %d: %w", mode, ret)
	}
	if cur != mode {
		return fmt.Errorf("NVML set MIG mode to %d: current %d, pending %d, activation: %w: %w", mode, cur, pending, activation, ErrModePending)
	}
	return nil
}

// migUUIDs maps (GPU instance ID, compute instance ID) to MIG device UUIDs.
func migUUIDs(dev nvml.Device) (map[[2]int]string, error) {
	count, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML get max MIG device count: %w", ret)
	}
	out := map[[2]int]string{}
	for i := 0; i < count; i++ {
		h, ret := dev.GetMigDeviceHandleByIndex(i)
		if gone(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML get MIG device %d: %w", i, ret)
		}
		gi, r1 := h.GetGpuInstanceId()
		ci, r2 := h.GetComputeInstanceId()
		u, r3 := h.GetUUID()
		if r1 != nvml.SUCCESS || r2 != nvml.SUCCESS || r3 != nvml.SUCCESS {
			continue // destroyed meanwhile
		}
		out[[2]int{gi, ci}] = u
	}
	return out, nil
}
