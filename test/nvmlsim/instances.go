package nvmlsim

import (
	"fmt"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Calls on GPU instance and compute instance handles.

func (l *Library) onGpuInstance(name string, h uintptr, f func(*session, nvml.GpuInstance) nvml.Return) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	s, ret := l.enter(name)
	if ret != nvml.SUCCESS {
		return ret
	}
	gi, ret := l.gpuInstance(s, h)
	if ret != nvml.SUCCESS {
		return ret
	}
	return f(s, gi)
}

func (l *Library) onComputeInstance(name string, h uintptr, f func(nvml.ComputeInstance) nvml.Return) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	s, ret := l.enter(name)
	if ret != nvml.SUCCESS {
		return ret
	}
	ci, ret := l.computeInstance(s, h)
	if ret != nvml.SUCCESS {
		return ret
	}
	return f(ci)
}

// GpuInstanceGetInfo is nvmlGpuInstanceGetInfo.
func (l *Library) GpuInstanceGetInfo(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceGetInfo", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		info, ret := gi.GetInfo()
		if ret != nvml.SUCCESS {
			return ret
		}
		dev, ret := l.deviceHandle(info.Device)
		return store(p, cGpuInstanceInfo{Device: dev, Id: info.Id, ProfileId: info.ProfileId, Placement: info.Placement}, ret)
	})
}

// GpuInstanceDestroy is nvmlGpuInstanceDestroy.
func (l *Library) GpuInstanceDestroy(h uintptr) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceDestroy", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		return gi.Destroy()
	})
}

// GpuInstanceGetComputeInstanceProfileInfo is
// nvmlGpuInstanceGetComputeInstanceProfileInfo.
func (l *Library) GpuInstanceGetComputeInstanceProfileInfo(h uintptr, profile, engProfile uint32, p unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceGetComputeInstanceProfileInfo", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		v, ret := gi.GetComputeInstanceProfileInfo(int(profile), int(engProfile))
		return store(p, v, ret)
	})
}

// GpuInstanceGetComputeInstanceProfileInfoV is
// nvmlGpuInstanceGetComputeInstanceProfileInfoV: with the profile name, as
// version 2 or 3 of the struct.
func (l *Library) GpuInstanceGetComputeInstanceProfileInfoV(h uintptr, profile, engProfile uint32, p unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceGetComputeInstanceProfileInfoV", h, func(s *session, gi nvml.GpuInstance) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		version := *(*uint32)(p)
		v2, v3 := nvml.STRUCT_VERSION(nvml.ComputeInstanceProfileInfo_v2{}, 2), nvml.STRUCT_VERSION(nvml.ComputeInstanceProfileInfo_v3{}, 3)
		if version != v2 && version != v3 {
			return nvml.ERROR_ARGUMENT_VERSION_MISMATCH
		}
		info, ret := gi.GetComputeInstanceProfileInfo(int(profile), int(engProfile))
		if ret != nvml.SUCCESS {
			return ret
		}
		name := "MIG " + ciProfileName(s, gi, info)
		out := nvml.ComputeInstanceProfileInfo_v3{
			Version: v3, Id: info.Id, SliceCount: info.SliceCount, InstanceCount: info.InstanceCount,
			MultiprocessorCount: info.MultiprocessorCount, SharedCopyEngineCount: info.SharedCopyEngineCount,
			SharedDecoderCount: info.SharedDecoderCount, SharedEncoderCount: info.SharedEncoderCount,
			SharedJpegCount: info.SharedJpegCount, SharedOfaCount: info.SharedOfaCount,
		}
		toCChars(out.Name[:], name)
		if version == v2 {
			// v2 is v3 without the trailing capabilities.
			out.Version = v2
			return store(p, *(*nvml.ComputeInstanceProfileInfo_v2)(unsafe.Pointer(&out)), nvml.SUCCESS)
		}
		return store(p, out, nvml.SUCCESS)
	})
}

// ciProfileName is "3g.40gb" for a compute instance spanning its GPU
// instance, "1c.3g.40gb" for one using one of its slices.
func ciProfileName(s *session, gi nvml.GpuInstance, ci nvml.ComputeInstanceProfileInfo) string {
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return ""
	}
	p := giProfile(s, info.Device, info.ProfileId)
	if p == nil {
		return ""
	}
	if int(ci.SliceCount) == p.Slices {
		return p.Name
	}
	return fmt.Sprintf("%dc.%s", ci.SliceCount, p.Name)
}

// GpuInstanceGetComputeInstancePossiblePlacements is
// nvmlGpuInstanceGetComputeInstancePossiblePlacements.
func (l *Library) GpuInstanceGetComputeInstancePossiblePlacements(h uintptr, profileID uint32, array, count unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceGetComputeInstancePossiblePlacements", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		pl, ret := gi.GetComputeInstancePossiblePlacements(&nvml.ComputeInstanceProfileInfo{Id: profileID})
		if ret != nvml.SUCCESS {
			return ret
		}
		return storeArray(array, count, pl)
	})
}

// GpuInstanceGetComputeInstanceRemainingCapacity is
// nvmlGpuInstanceGetComputeInstanceRemainingCapacity.
func (l *Library) GpuInstanceGetComputeInstanceRemainingCapacity(h uintptr, profileID uint32, p unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceGetComputeInstanceRemainingCapacity", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		v, ret := gi.GetComputeInstanceRemainingCapacity(&nvml.ComputeInstanceProfileInfo{Id: profileID})
		return store(p, uint32(v), ret)
	})
}

// GpuInstanceCreateComputeInstance is nvmlGpuInstanceCreateComputeInstance.
func (l *Library) GpuInstanceCreateComputeInstance(h uintptr, profileID uint32, p unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceCreateComputeInstance", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		ci, ret := gi.CreateComputeInstance(&nvml.ComputeInstanceProfileInfo{Id: profileID})
		return l.storeComputeInstance(p, ci, ret)
	})
}

// GpuInstanceCreateComputeInstanceWithPlacement is
// nvmlGpuInstanceCreateComputeInstanceWithPlacement.
func (l *Library) GpuInstanceCreateComputeInstanceWithPlacement(h uintptr, profileID uint32, placement, p unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceCreateComputeInstanceWithPlacement", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		if p == nil || placement == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		pl := *(*nvml.ComputeInstancePlacement)(placement)
		ci, ret := gi.CreateComputeInstanceWithPlacement(&nvml.ComputeInstanceProfileInfo{Id: profileID}, &pl)
		return l.storeComputeInstance(p, ci, ret)
	})
}

// GpuInstanceGetComputeInstances is nvmlGpuInstanceGetComputeInstances.
func (l *Library) GpuInstanceGetComputeInstances(h uintptr, profileID uint32, array, count unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceGetComputeInstances", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		cis, ret := gi.GetComputeInstances(&nvml.ComputeInstanceProfileInfo{Id: profileID})
		if ret != nvml.SUCCESS {
			return ret
		}
		handles := make([]uintptr, 0, len(cis))
		for _, ci := range cis {
			ch, ret := l.computeInstanceHandle(ci)
			if ret != nvml.SUCCESS {
				return ret
			}
			handles = append(handles, ch)
		}
		return storeHandles(array, count, handles)
	})
}

// GpuInstanceGetComputeInstanceById is nvmlGpuInstanceGetComputeInstanceById.
func (l *Library) GpuInstanceGetComputeInstanceById(h uintptr, id uint32, p unsafe.Pointer) nvml.Return {
	return l.onGpuInstance("nvmlGpuInstanceGetComputeInstanceById", h, func(_ *session, gi nvml.GpuInstance) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		ci, ret := gi.GetComputeInstanceById(int(id))
		return l.storeComputeInstance(p, ci, ret)
	})
}

func (l *Library) storeComputeInstance(p unsafe.Pointer, ci nvml.ComputeInstance, ret nvml.Return) nvml.Return {
	if ret != nvml.SUCCESS {
		return ret
	}
	h, ret := l.computeInstanceHandle(ci)
	return store(p, h, ret)
}

// ComputeInstanceGetInfo is nvmlComputeInstanceGetInfo(_v2) (one struct).
func (l *Library) ComputeInstanceGetInfo(name string, h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onComputeInstance(name, h, func(ci nvml.ComputeInstance) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		info, ret := ci.GetInfo()
		if ret != nvml.SUCCESS {
			return ret
		}
		dev, ret := l.deviceHandle(info.Device)
		if ret != nvml.SUCCESS {
			return ret
		}
		gi, ret := l.gpuInstanceHandle(info.GpuInstance)
		return store(p, cComputeInstanceInfo{Device: dev, GpuInstance: gi, Id: info.Id, ProfileId: info.ProfileId, Placement: info.Placement}, ret)
	})
}

// ComputeInstanceDestroy is nvmlComputeInstanceDestroy.
func (l *Library) ComputeInstanceDestroy(h uintptr) nvml.Return {
	return l.onComputeInstance("nvmlComputeInstanceDestroy", h, func(ci nvml.ComputeInstance) nvml.Return {
		return ci.Destroy()
	})
}
