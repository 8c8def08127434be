package nvmlsim

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/sim"
)

// MIG calls on a GPU handle, and on MIG device handles.

// DeviceGetMigMode is nvmlDeviceGetMigMode.
func (l *Library) DeviceGetMigMode(h uintptr, current, pending unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetMigMode", h, func(d nvml.Device) nvml.Return {
		if current == nil || pending == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		c, p, ret := d.GetMigMode()
		if ret != nvml.SUCCESS {
			return ret
		}
		*(*uint32)(current), *(*uint32)(pending) = uint32(c), uint32(p)
		return nvml.SUCCESS
	})
}

// DeviceGetEccMode is nvmlDeviceGetEccMode.
func (l *Library) DeviceGetEccMode(h uintptr, current, pending unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetEccMode", h, func(d nvml.Device) nvml.Return {
		if current == nil || pending == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		c, p, ret := d.GetEccMode()
		if ret != nvml.SUCCESS {
			return ret
		}
		*(*uint32)(current), *(*uint32)(pending) = uint32(c), uint32(p)
		return nvml.SUCCESS
	})
}

// DeviceSetMigMode is nvmlDeviceSetMigMode.
func (l *Library) DeviceSetMigMode(h uintptr, mode uint32, activation unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceSetMigMode", h, func(d nvml.Device) nvml.Return {
		if activation == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		status, ret := d.SetMigMode(int(mode))
		*(*nvml.Return)(activation) = status
		return ret
	})
}

// DeviceGetMaxMigDeviceCount is nvmlDeviceGetMaxMigDeviceCount.
func (l *Library) DeviceGetMaxMigDeviceCount(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetMaxMigDeviceCount", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetMaxMigDeviceCount()
		return store(p, uint32(v), ret)
	})
}

// DeviceGetMigDeviceHandleByIndex is nvmlDeviceGetMigDeviceHandleByIndex.
func (l *Library) DeviceGetMigDeviceHandleByIndex(h uintptr, index uint32, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetMigDeviceHandleByIndex", h, func(d nvml.Device) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		m, ret := d.GetMigDeviceHandleByIndex(int(index))
		return l.storeDevice(p, m, ret)
	})
}

// DeviceIsMigDeviceHandle is nvmlDeviceIsMigDeviceHandle.
func (l *Library) DeviceIsMigDeviceHandle(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceIsMigDeviceHandle", h, func(d nvml.Device) nvml.Return {
		v, ret := d.IsMigDeviceHandle()
		return store(p, boolToUint32(v), ret)
	})
}

// DeviceGetDeviceHandleFromMigDeviceHandle is
// nvmlDeviceGetDeviceHandleFromMigDeviceHandle.
func (l *Library) DeviceGetDeviceHandleFromMigDeviceHandle(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", h, func(d nvml.Device) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		parent, ret := d.GetDeviceHandleFromMigDeviceHandle()
		return l.storeDevice(p, parent, ret)
	})
}

// DeviceGetGpuInstanceId is nvmlDeviceGetGpuInstanceId.
func (l *Library) DeviceGetGpuInstanceId(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetGpuInstanceId", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetGpuInstanceId()
		return store(p, uint32(v), ret)
	})
}

// DeviceGetComputeInstanceId is nvmlDeviceGetComputeInstanceId.
func (l *Library) DeviceGetComputeInstanceId(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetComputeInstanceId", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetComputeInstanceId()
		return store(p, uint32(v), ret)
	})
}

// DeviceGetGpuInstanceProfileInfo is nvmlDeviceGetGpuInstanceProfileInfo
// (profile is an NVML_GPU_INSTANCE_PROFILE_* index).
func (l *Library) DeviceGetGpuInstanceProfileInfo(h uintptr, profile uint32, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetGpuInstanceProfileInfo", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetGpuInstanceProfileInfo(int(profile))
		return store(p, v, ret)
	})
}

// DeviceGetGpuInstanceProfileInfoV is nvmlDeviceGetGpuInstanceProfileInfoV:
// the info with the profile name, as version 2 or 3 of the struct.
func (l *Library) DeviceGetGpuInstanceProfileInfoV(h uintptr, profile uint32, p unsafe.Pointer) nvml.Return {
	return l.onSessionDevice("nvmlDeviceGetGpuInstanceProfileInfoV", h, func(s *session, d nvml.Device) nvml.Return {
		info, ret := d.GetGpuInstanceProfileInfo(int(profile))
		return storeProfileInfoV(s, p, d, info, ret)
	})
}

// DeviceGetGpuInstanceProfileInfoByIdV is
// nvmlDeviceGetGpuInstanceProfileInfoByIdV (by unique profile ID).
func (l *Library) DeviceGetGpuInstanceProfileInfoByIdV(h uintptr, id uint32, p unsafe.Pointer) nvml.Return {
	return l.onSessionDevice("nvmlDeviceGetGpuInstanceProfileInfoByIdV", h, func(s *session, d nvml.Device) nvml.Return {
		for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
			info, ret := d.GetGpuInstanceProfileInfo(idx)
			if ret == nvml.SUCCESS && info.Id == id {
				return storeProfileInfoV(s, p, d, info, ret)
			}
			if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
				return ret
			}
		}
		if _, _, ret := d.GetMigMode(); ret != nvml.SUCCESS {
			return ret
		}
		return nvml.ERROR_INVALID_ARGUMENT
	})
}

func storeProfileInfoV(s *session, p unsafe.Pointer, d nvml.Device, info nvml.GpuInstanceProfileInfo, ret nvml.Return) nvml.Return {
	if p == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	version := *(*uint32)(p)
	v2, v3 := nvml.STRUCT_VERSION(nvml.GpuInstanceProfileInfo_v2{}, 2), nvml.STRUCT_VERSION(nvml.GpuInstanceProfileInfo_v3{}, 3)
	if version != v2 && version != v3 {
		return nvml.ERROR_ARGUMENT_VERSION_MISMATCH
	}
	if ret != nvml.SUCCESS {
		return ret
	}
	name := "MIG " + giProfileName(s, d, info.Id)
	if version == v2 {
		out := nvml.GpuInstanceProfileInfo_v2{
			Version: v2, Id: info.Id, IsP2pSupported: info.IsP2pSupported, SliceCount: info.SliceCount,
			InstanceCount: info.InstanceCount, MultiprocessorCount: info.MultiprocessorCount,
			CopyEngineCount: info.CopyEngineCount, DecoderCount: info.DecoderCount, EncoderCount: info.EncoderCount,
			JpegCount: info.JpegCount, OfaCount: info.OfaCount, MemorySizeMB: info.MemorySizeMB,
		}
		toCChars(out.Name[:], name)
		return store(p, out, nvml.SUCCESS)
	}
	out := nvml.GpuInstanceProfileInfo_v3{
		Version: v3, Id: info.Id, SliceCount: info.SliceCount,
		InstanceCount: info.InstanceCount, MultiprocessorCount: info.MultiprocessorCount,
		CopyEngineCount: info.CopyEngineCount, DecoderCount: info.DecoderCount, EncoderCount: info.EncoderCount,
		JpegCount: info.JpegCount, OfaCount: info.OfaCount, MemorySizeMB: info.MemorySizeMB,
	}
	if info.IsP2pSupported != 0 {
		out.Capabilities |= nvml.GPU_INSTANCE_PROFILE_CAPS_P2P
	}
	toCChars(out.Name[:], name)
	return store(p, out, nvml.SUCCESS)
}

// giProfile returns the profile of the simulated model of GPU d (a GPU,
// not a MIG device) with the unique profile ID id.
func giProfile(s *session, d nvml.Device, id uint32) *sim.GPUInstanceProfile {
	idx, ret := d.GetIndex()
	gpus := s.srv.Profile().GPUs
	if ret != nvml.SUCCESS || idx < 0 || idx >= len(gpus) || gpus[idx].Model.MIG == nil {
		return nil
	}
	mig := gpus[idx].Model.MIG
	for i := range mig.GPUInstanceProfiles {
		if mig.GPUInstanceProfiles[i].ID == id {
			return &mig.GPUInstanceProfiles[i]
		}
	}
	return nil
}

func giProfileName(s *session, d nvml.Device, id uint32) string {
	if p := giProfile(s, d, id); p != nil {
		return p.Name
	}
	return ""
}

// DeviceGetGpuInstancePossiblePlacements is
// nvmlDeviceGetGpuInstancePossiblePlacements(_v2): with a NULL array it
// reports the count.
func (l *Library) DeviceGetGpuInstancePossiblePlacements(name string, h uintptr, profileID uint32, array, count unsafe.Pointer) nvml.Return {
	return l.onDevice(name, h, func(d nvml.Device) nvml.Return {
		pl, ret := d.GetGpuInstancePossiblePlacements(&nvml.GpuInstanceProfileInfo{Id: profileID})
		if ret != nvml.SUCCESS {
			return ret
		}
		return storeArray(array, count, pl)
	})
}

// storeArray is storeHandles for placements: a NULL array only asks for
// the count.
func storeArray[T any](array, count unsafe.Pointer, v []T) nvml.Return {
	if count == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	n := (*uint32)(count)
	if array == nil {
		*n = uint32(len(v))
		return nvml.SUCCESS
	}
	if *n < uint32(len(v)) {
		*n = uint32(len(v))
		return nvml.ERROR_INSUFFICIENT_SIZE
	}
	*n = uint32(len(v))
	copy(unsafe.Slice((*T)(array), len(v)), v)
	return nvml.SUCCESS
}

// DeviceGetGpuInstanceRemainingCapacity is
// nvmlDeviceGetGpuInstanceRemainingCapacity.
func (l *Library) DeviceGetGpuInstanceRemainingCapacity(h uintptr, profileID uint32, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetGpuInstanceRemainingCapacity", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetGpuInstanceRemainingCapacity(&nvml.GpuInstanceProfileInfo{Id: profileID})
		return store(p, uint32(v), ret)
	})
}

// DeviceCreateGpuInstance is nvmlDeviceCreateGpuInstance.
func (l *Library) DeviceCreateGpuInstance(h uintptr, profileID uint32, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceCreateGpuInstance", h, func(d nvml.Device) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		gi, ret := d.CreateGpuInstance(&nvml.GpuInstanceProfileInfo{Id: profileID})
		return l.storeGpuInstance(p, gi, ret)
	})
}

// DeviceCreateGpuInstanceWithPlacement is
// nvmlDeviceCreateGpuInstanceWithPlacement.
func (l *Library) DeviceCreateGpuInstanceWithPlacement(h uintptr, profileID uint32, placement, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceCreateGpuInstanceWithPlacement", h, func(d nvml.Device) nvml.Return {
		if p == nil || placement == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		pl := *(*nvml.GpuInstancePlacement)(placement)
		gi, ret := d.CreateGpuInstanceWithPlacement(&nvml.GpuInstanceProfileInfo{Id: profileID}, &pl)
		return l.storeGpuInstance(p, gi, ret)
	})
}

// DeviceGetGpuInstances is nvmlDeviceGetGpuInstances.
func (l *Library) DeviceGetGpuInstances(h uintptr, profileID uint32, array, count unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetGpuInstances", h, func(d nvml.Device) nvml.Return {
		gis, ret := d.GetGpuInstances(&nvml.GpuInstanceProfileInfo{Id: profileID})
		if ret != nvml.SUCCESS {
			return ret
		}
		handles := make([]uintptr, 0, len(gis))
		for _, gi := range gis {
			gh, ret := l.gpuInstanceHandle(gi)
			if ret != nvml.SUCCESS {
				return ret
			}
			handles = append(handles, gh)
		}
		return storeHandles(array, count, handles)
	})
}

// DeviceGetGpuInstanceById is nvmlDeviceGetGpuInstanceById.
func (l *Library) DeviceGetGpuInstanceById(h uintptr, id uint32, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetGpuInstanceById", h, func(d nvml.Device) nvml.Return {
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		gi, ret := d.GetGpuInstanceById(int(id))
		return l.storeGpuInstance(p, gi, ret)
	})
}

func (l *Library) storeGpuInstance(p unsafe.Pointer, gi nvml.GpuInstance, ret nvml.Return) nvml.Return {
	if ret != nvml.SUCCESS {
		return ret
	}
	h, ret := l.gpuInstanceHandle(gi)
	return store(p, h, ret)
}
