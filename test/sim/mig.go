package sim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/uuid"
)

// gpuInstance is a simulated MIG GPU instance. All mutable state is guarded
// by the server's mutex.
type gpuInstance struct {
	mock.GpuInstance

	dev       *device
	prof      *GPUInstanceProfile
	info      nvml.GpuInstanceInfo
	cis       map[uint32]*computeInstance
	destroyed bool
}

// computeInstance is a simulated compute instance; each one is exposed as a
// MIG device.
type computeInstance struct {
	mock.ComputeInstance

	gi        *gpuInstance
	prof      ciProfile
	info      nvml.ComputeInstanceInfo
	mig       *migDevice
	destroyed bool
}

var (
	_ nvml.GpuInstance     = (*gpuInstance)(nil)
	_ nvml.ComputeInstance = (*computeInstance)(nil)
)

// createGpuInstance implements CreateGpuInstance (pl == nil: see
// autoPlacement) and CreateGpuInstanceWithPlacement.
func (d *device) createGpuInstance(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	p := d.profileFor(info)
	if p == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if d.migMode != nvml.DEVICE_MIG_ENABLE {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	gi, ret := d.createGpuInstanceLocked(p, pl)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	d.srv.persistLocked()
	return gi, nvml.SUCCESS
}

func (d *device) createGpuInstanceLocked(p *GPUInstanceProfile, pl *nvml.GpuInstancePlacement) (*gpuInstance, nvml.Return) {
	mig := d.model().MIG
	slots := d.slotsLocked()
	var start int
	if pl == nil {
		var ret nvml.Return
		if start, ret = autoPlacement(mig, slots, p); ret != nvml.SUCCESS {
			return nil, ret
		}
	} else {
		if int(pl.Size) != p.PlacementSize {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		start = int(pl.Start)
		if ret := checkPlacement(mig, slots, p, start); ret != nvml.SUCCESS {
			return nil, ret
		}
	}
	gi := &gpuInstance{dev: d, prof: p, cis: map[uint32]*computeInstance{}}
	gi.info = nvml.GpuInstanceInfo{
		Device:    d,
		Id:        gpuInstanceID(mig, p, start),
		ProfileId: p.ID,
		Placement: nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.PlacementSize)},
	}
	gi.setFuncs()
	finishHandle(&gi.GpuInstance, d)
	d.gis[gi.info.Id] = gi
	return gi, nvml.SUCCESS
}

// createInitialMIGDevices creates the profile's migDevices, each with one
// compute instance spanning its GPU instance.
func (d *device) createInitialMIGDevices() {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	for _, name := range d.gpu.MIGDevices {
		p, ok := d.model().MIG.GPUInstanceProfileByName(name)
		if !ok {
			continue // Parse rejects unknown names
		}
		gi, ret := d.createGpuInstanceLocked(p, nil)
		if ret != nvml.SUCCESS {
			continue // Parse rejects layouts that do not fit
		}
		if cp, ok := computeProfile(d.model().MIG, p, fullComputeProfile(p)); ok {
			// A fresh GPU instance always has room for its full compute instance.
			_, _ = gi.createComputeInstanceLocked(cp, nil)
		}
	}
}

// fullComputeProfile is the NVML compute instance profile index that spans
// a whole GPU instance of p.
func fullComputeProfile(p *GPUInstanceProfile) int {
	for idx, n := range ciProfileSlices {
		if n == p.Slices {
			return idx
		}
	}
	return -1
}

func (d *device) slotsLocked() []giSlot {
	slots := make([]giSlot, 0, len(d.gis))
	for _, gi := range d.gis {
		slots = append(slots, giSlot{prof: gi.prof, start: int(gi.info.Placement.Start)})
	}
	return slots
}

func (d *device) sortedGIsLocked() []*gpuInstance {
	return slices.SortedFunc(maps.Values(d.gis), func(a, b *gpuInstance) int { return cmp.Compare(a.info.Id, b.info.Id) })
}

// migDevicesLocked lists the MIG devices of d ordered by GPU instance ID,
// then compute instance ID: the order of GetMigDeviceHandleByIndex.
func (d *device) migDevicesLocked() []*migDevice {
	var out []*migDevice
	for _, gi := range d.sortedGIsLocked() {
		for _, ci := range gi.sortedCIsLocked() {
			out = append(out, ci.mig)
		}
	}
	return out
}

func (gi *gpuInstance) sortedCIsLocked() []*computeInstance {
	return slices.SortedFunc(maps.Values(gi.cis), func(a, b *computeInstance) int { return cmp.Compare(a.info.Id, b.info.Id) })
}

func (gi *gpuInstance) ciSlotsLocked() []ciSlot {
	slots := make([]ciSlot, 0, len(gi.cis))
	for _, ci := range gi.cis {
		slots = append(slots, ciSlot{slices: ci.prof.slices, start: int(ci.info.Placement.Start)})
	}
	return slots
}

// ciProfileFor resolves compute instance profile info passed back by a caller.
func (gi *gpuInstance) ciProfileFor(info *nvml.ComputeInstanceProfileInfo) (ciProfile, bool) {
	if info == nil {
		return ciProfile{}, false
	}
	return computeProfile(gi.dev.model().MIG, gi.prof, int(info.Id))
}

func (gi *gpuInstance) setFuncs() {
	mu := &gi.dev.srv.mu
	mig := gi.dev.model().MIG
	gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		if gi.destroyed {
			return nvml.GpuInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return gi.info, nvml.SUCCESS
	}
	gi.DestroyFunc = func() nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case gi.destroyed:
			return nvml.ERROR_INVALID_ARGUMENT
		case len(gi.cis) > 0:
			return nvml.ERROR_IN_USE // destroy its compute instances first
		}
		gi.destroyLocked()
		gi.dev.srv.persistLocked()
		return nvml.SUCCESS
	}
	gi.GetComputeInstanceProfileInfoFunc = func(profile, engProfile int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		if profile < 0 || profile >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT ||
			engProfile < 0 || engProfile >= nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		cp, ok := computeProfile(mig, gi.prof, profile)
		if !ok {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return cp.info(gi.prof), nvml.SUCCESS
	}
	gi.GetComputeInstancePossiblePlacementsFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstancePlacement, nvml.Return) {
		cp, ok := gi.ciProfileFor(info)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		out := make([]nvml.ComputeInstancePlacement, len(cp.placements))
		for i, start := range cp.placements {
			out[i] = nvml.ComputeInstancePlacement{Start: uint32(start), Size: uint32(cp.slices)}
		}
		return out, nvml.SUCCESS
	}
	gi.GetComputeInstanceRemainingCapacityFunc = func(info *nvml.ComputeInstanceProfileInfo) (int, nvml.Return) {
		cp, ok := gi.ciProfileFor(info)
		if !ok {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		mu.Lock()
		defer mu.Unlock()
		if gi.destroyed {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return remainingCICapacity(gi.ciSlotsLocked(), cp), nvml.SUCCESS
	}
	gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		return gi.createComputeInstance(info, nil)
	}
	gi.CreateComputeInstanceWithPlacementFunc = func(info *nvml.ComputeInstanceProfileInfo, pl *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
		if pl == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return gi.createComputeInstance(info, pl)
	}
	gi.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		cp, ok := gi.ciProfileFor(info)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		mu.Lock()
		defer mu.Unlock()
		if gi.destroyed {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		var out []nvml.ComputeInstance
		for _, ci := range gi.sortedCIsLocked() {
			if ci.prof.nvmlProfile == cp.nvmlProfile {
				out = append(out, ci)
			}
		}
		return out, nvml.SUCCESS
	}
	gi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		if gi.destroyed {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if ci, ok := gi.cis[uint32(id)]; ok && id >= 0 {
			return ci, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

func (gi *gpuInstance) createComputeInstance(info *nvml.ComputeInstanceProfileInfo, pl *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
	cp, ok := gi.ciProfileFor(info)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	gi.dev.srv.mu.Lock()
	defer gi.dev.srv.mu.Unlock()
	if gi.destroyed {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	ci, ret := gi.createComputeInstanceLocked(cp, pl)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	gi.dev.srv.persistLocked()
	return ci, nvml.SUCCESS
}

func (gi *gpuInstance) createComputeInstanceLocked(cp ciProfile, pl *nvml.ComputeInstancePlacement) (*computeInstance, nvml.Return) {
	slots := gi.ciSlotsLocked()
	var start int
	if pl == nil {
		var ret nvml.Return
		if start, ret = firstFreeCIPlacement(slots, cp); ret != nvml.SUCCESS {
			return nil, ret
		}
	} else {
		if int(pl.Size) != cp.slices {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		start = int(pl.Start)
		if ret := checkCIPlacement(slots, cp, start); ret != nvml.SUCCESS {
			return nil, ret
		}
	}
	id := uint32(0)
	for gi.cis[id] != nil {
		id++
	}
	ci := &computeInstance{gi: gi, prof: cp}
	ci.info = nvml.ComputeInstanceInfo{
		Device:      gi.dev,
		GpuInstance: gi,
		Id:          id,
		ProfileId:   uint32(cp.nvmlProfile),
		Placement:   nvml.ComputeInstancePlacement{Start: uint32(start), Size: uint32(cp.slices)},
	}
	ci.setFuncs()
	finishHandle(&ci.ComputeInstance, gi.dev)
	gi.dev.migCounter++
	key := fmt.Sprintf("mig/%s/%d/%d/%d", gi.dev.uuid, gi.info.Id, id, gi.dev.migCounter)
	ci.mig = newMIGDevice(ci, "MIG-"+uuid.NewSHA1(uuidNamespace, []byte(key)).String())
	gi.cis[id] = ci
	return ci, nvml.SUCCESS
}

func (ci *computeInstance) setFuncs() {
	mu := &ci.gi.dev.srv.mu
	ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		if ci.destroyed {
			return nvml.ComputeInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return ci.info, nvml.SUCCESS
	}
	ci.DestroyFunc = func() nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		if ci.destroyed {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		ci.destroyLocked()
		ci.gi.dev.srv.persistLocked()
		return nvml.SUCCESS
	}
}

// destroyLocked destroys gi and its compute instances (Destroy, a GPU
// reset, or another process's change): their handles answer as destroyed
// from now on.
func (gi *gpuInstance) destroyLocked() {
	for _, ci := range gi.cis {
		ci.destroyLocked()
	}
	gi.destroyed = true
	delete(gi.dev.gis, gi.info.Id)
}

// destroyLocked destroys ci: its handles answer as destroyed from now on.
func (ci *computeInstance) destroyLocked() {
	ci.destroyed = true
	delete(ci.gi.cis, ci.info.Id)
}
