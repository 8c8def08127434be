package nvmlsim

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// System queries and device enumeration.

// SystemGetDriverVersion is nvmlSystemGetDriverVersion.
func (l *Library) SystemGetDriverVersion(buf unsafe.Pointer, length uint32) (ret nvml.Return) {
	defer l.recoverPanic("nvmlSystemGetDriverVersion", &ret)
	s, ret := l.enter("nvmlSystemGetDriverVersion")
	if ret != nvml.SUCCESS {
		return ret
	}
	v, ret := s.srv.SystemGetDriverVersion()
	return storeString(buf, length, v, ret)
}

// SystemGetNVMLVersion is nvmlSystemGetNVMLVersion.
func (l *Library) SystemGetNVMLVersion(buf unsafe.Pointer, length uint32) (ret nvml.Return) {
	defer l.recoverPanic("nvmlSystemGetNVMLVersion", &ret)
	s, ret := l.enter("nvmlSystemGetNVMLVersion")
	if ret != nvml.SUCCESS {
		return ret
	}
	v, ret := s.srv.SystemGetNVMLVersion()
	return storeString(buf, length, v, ret)
}

// SystemGetCudaDriverVersion is nvmlSystemGetCudaDriverVersion(_v2).
func (l *Library) SystemGetCudaDriverVersion(name string, version unsafe.Pointer) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	s, ret := l.enter(name)
	if ret != nvml.SUCCESS {
		return ret
	}
	v, ret := s.srv.SystemGetCudaDriverVersion()
	return store(version, int32(v), ret)
}

// DeviceGetCount is nvmlDeviceGetCount(_v2).
func (l *Library) DeviceGetCount(name string, count unsafe.Pointer) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	s, ret := l.enter(name)
	if ret != nvml.SUCCESS {
		return ret
	}
	n, ret := s.srv.DeviceGetCount()
	return store(count, uint32(n), ret)
}

// DeviceGetHandleByIndex is nvmlDeviceGetHandleByIndex(_v2).
func (l *Library) DeviceGetHandleByIndex(name string, index uint32, device unsafe.Pointer) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	s, ret := l.enter(name)
	if ret != nvml.SUCCESS {
		return ret
	}
	if device == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d, ret := s.srv.DeviceGetHandleByIndex(int(index))
	return l.storeDevice(device, d, ret)
}

// DeviceGetHandleByUUID is nvmlDeviceGetHandleByUUID: GPU and MIG UUIDs.
func (l *Library) DeviceGetHandleByUUID(uuid, device unsafe.Pointer) nvml.Return {
	return l.handleByString("nvmlDeviceGetHandleByUUID", uuid, device, nvml.Interface.DeviceGetHandleByUUID)
}

// DeviceGetHandleByPciBusId is nvmlDeviceGetHandleByPciBusId(_v2).
func (l *Library) DeviceGetHandleByPciBusId(name string, busID, device unsafe.Pointer) nvml.Return {
	return l.handleByString(name, busID, device, nvml.Interface.DeviceGetHandleByPciBusId)
}

// DeviceGetHandleBySerial is nvmlDeviceGetHandleBySerial.
func (l *Library) DeviceGetHandleBySerial(serial, device unsafe.Pointer) nvml.Return {
	return l.handleByString("nvmlDeviceGetHandleBySerial", serial, device, nvml.Interface.DeviceGetHandleBySerial)
}

// handleByString looks a device up by the C string key and writes its
// handle to device.
func (l *Library) handleByString(name string, key, device unsafe.Pointer,
	lookup func(nvml.Interface, string) (nvml.Device, nvml.Return)) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	s, ret := l.enter(name)
	if ret != nvml.SUCCESS {
		return ret
	}
	id, ok := loadString(key)
	if !ok || device == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d, ret := lookup(s.srv, id)
	return l.storeDevice(device, d, ret)
}

// storeDevice writes the handle of d when ret is SUCCESS.
func (l *Library) storeDevice(p unsafe.Pointer, d nvml.Device, ret nvml.Return) nvml.Return {
	if ret != nvml.SUCCESS {
		return ret
	}
	h, ret := l.deviceHandle(d)
	return store(p, h, ret)
}
