package nvmlsim

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Queries on GPU and MIG device handles.

// onDevice runs f on the device behind handle h.
func (l *Library) onDevice(name string, h uintptr, f func(nvml.Device) nvml.Return) nvml.Return {
	return l.onSessionDevice(name, h, func(_ *session, d nvml.Device) nvml.Return { return f(d) })
}

// onSessionDevice is onDevice for calls that also need the session.
func (l *Library) onSessionDevice(name string, h uintptr, f func(*session, nvml.Device) nvml.Return) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	s, ret := l.enter(name)
	if ret != nvml.SUCCESS {
		return ret
	}
	d, ret := l.device(s, h)
	if ret != nvml.SUCCESS {
		return ret
	}
	return f(s, d)
}

// DeviceGetUUID is nvmlDeviceGetUUID.
func (l *Library) DeviceGetUUID(h uintptr, buf unsafe.Pointer, length uint32) nvml.Return {
	return l.onDevice("nvmlDeviceGetUUID", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetUUID()
		return storeString(buf, length, v, ret)
	})
}

// DeviceGetName is nvmlDeviceGetName.
func (l *Library) DeviceGetName(h uintptr, buf unsafe.Pointer, length uint32) nvml.Return {
	return l.onDevice("nvmlDeviceGetName", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetName()
		return storeString(buf, length, v, ret)
	})
}

// DeviceGetSerial is nvmlDeviceGetSerial.
func (l *Library) DeviceGetSerial(h uintptr, buf unsafe.Pointer, length uint32) nvml.Return {
	return l.onDevice("nvmlDeviceGetSerial", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetSerial()
		return storeString(buf, length, v, ret)
	})
}

// DeviceGetBoardPartNumber is nvmlDeviceGetBoardPartNumber.
func (l *Library) DeviceGetBoardPartNumber(h uintptr, buf unsafe.Pointer, length uint32) nvml.Return {
	return l.onDevice("nvmlDeviceGetBoardPartNumber", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetBoardPartNumber()
		return storeString(buf, length, v, ret)
	})
}

// DeviceGetBrand is nvmlDeviceGetBrand.
func (l *Library) DeviceGetBrand(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetBrand", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetBrand()
		return store(p, v, ret)
	})
}

// DeviceGetArchitecture is nvmlDeviceGetArchitecture.
func (l *Library) DeviceGetArchitecture(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetArchitecture", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetArchitecture()
		return store(p, v, ret)
	})
}

// DeviceGetCudaComputeCapability is nvmlDeviceGetCudaComputeCapability.
func (l *Library) DeviceGetCudaComputeCapability(h uintptr, major, minor unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetCudaComputeCapability", h, func(d nvml.Device) nvml.Return {
		if major == nil || minor == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		a, b, ret := d.GetCudaComputeCapability()
		if ret != nvml.SUCCESS {
			return ret
		}
		*(*int32)(major), *(*int32)(minor) = int32(a), int32(b)
		return nvml.SUCCESS
	})
}

// DeviceGetIndex is nvmlDeviceGetIndex.
func (l *Library) DeviceGetIndex(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetIndex", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetIndex()
		return store(p, uint32(v), ret)
	})
}

// DeviceGetMinorNumber is nvmlDeviceGetMinorNumber.
func (l *Library) DeviceGetMinorNumber(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetMinorNumber", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetMinorNumber()
		return store(p, uint32(v), ret)
	})
}

// DeviceGetModuleID is nvmlDeviceGetModuleId.
func (l *Library) DeviceGetModuleID(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetModuleId", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetModuleId()
		return store(p, uint32(v), ret)
	})
}

// DeviceGetMemoryInfo is nvmlDeviceGetMemoryInfo.
func (l *Library) DeviceGetMemoryInfo(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetMemoryInfo", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetMemoryInfo()
		return store(p, v, ret)
	})
}

// DeviceGetMemoryInfo_v2 is nvmlDeviceGetMemoryInfo_v2; the caller sets
// the struct version.
func (l *Library) DeviceGetMemoryInfo_v2(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetMemoryInfo_v2", h, func(d nvml.Device) nvml.Return {
		if ret := checkVersion(p, nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2)); ret != nvml.SUCCESS {
			return ret
		}
		v, ret := d.GetMemoryInfo_v2()
		return store(p, v, ret)
	})
}

// checkVersion checks the version field that starts a versioned struct.
func checkVersion(p unsafe.Pointer, want uint32) nvml.Return {
	if p == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if *(*uint32)(p) != want {
		return nvml.ERROR_ARGUMENT_VERSION_MISMATCH
	}
	return nvml.SUCCESS
}

// DeviceGetPciInfo is nvmlDeviceGetPciInfo, _v2 and _v3 (one struct).
func (l *Library) DeviceGetPciInfo(name string, h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice(name, h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetPciInfo()
		return store(p, v, ret)
	})
}

// DeviceGetPciInfoExt is nvmlDeviceGetPciInfoExt.
func (l *Library) DeviceGetPciInfoExt(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetPciInfoExt", h, func(d nvml.Device) nvml.Return {
		if ret := checkVersion(p, nvml.STRUCT_VERSION(nvml.PciInfoExt{}, 1)); ret != nvml.SUCCESS {
			return ret
		}
		v, ret := d.GetPciInfoExt()
		return store(p, v, ret)
	})
}

// DeviceGetNumaNodeId is nvmlDeviceGetNumaNodeId.
func (l *Library) DeviceGetNumaNodeId(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetNumaNodeId", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetNumaNodeId()
		return store(p, uint32(v), ret)
	})
}

// DeviceGetComputeMode is nvmlDeviceGetComputeMode.
func (l *Library) DeviceGetComputeMode(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetComputeMode", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetComputeMode()
		return store(p, v, ret)
	})
}

// DeviceSetComputeMode is nvmlDeviceSetComputeMode.
func (l *Library) DeviceSetComputeMode(h uintptr, mode int32) nvml.Return {
	return l.onDevice("nvmlDeviceSetComputeMode", h, func(d nvml.Device) nvml.Return {
		return d.SetComputeMode(nvml.ComputeMode(mode))
	})
}

// DeviceGetP2PStatus is nvmlDeviceGetP2PStatus.
func (l *Library) DeviceGetP2PStatus(h1, h2 uintptr, index int32, p unsafe.Pointer) (ret nvml.Return) {
	defer l.recoverPanic("nvmlDeviceGetP2PStatus", &ret)
	s, ret := l.enter("nvmlDeviceGetP2PStatus")
	if ret != nvml.SUCCESS {
		return ret
	}
	d1, ret := l.device(s, h1)
	if ret != nvml.SUCCESS {
		return ret
	}
	d2, ret := l.device(s, h2)
	if ret != nvml.SUCCESS {
		return ret
	}
	v, ret := d1.GetP2PStatus(d2, nvml.GpuP2PCapsIndex(index))
	return store(p, v, ret)
}

// DeviceGetAttributes is nvmlDeviceGetAttributes(_v2), for MIG devices.
func (l *Library) DeviceGetAttributes(name string, h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice(name, h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetAttributes()
		return store(p, v, ret)
	})
}

// DeviceGetTemperature is nvmlDeviceGetTemperature (the GPU sensor).
func (l *Library) DeviceGetTemperature(h uintptr, sensor int32, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetTemperature", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetTemperature(nvml.TemperatureSensors(sensor))
		return store(p, v, ret)
	})
}
