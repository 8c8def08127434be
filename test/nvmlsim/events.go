package nvmlsim

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Health: event sets, ECC counters, field values. Faults come from the
// fault file (sim.FaultFile) the session watches.

// DeviceGetSupportedEventTypes is nvmlDeviceGetSupportedEventTypes.
func (l *Library) DeviceGetSupportedEventTypes(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetSupportedEventTypes", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetSupportedEventTypes()
		return store(p, v, ret)
	})
}

// DeviceGetTotalEccErrors is nvmlDeviceGetTotalEccErrors.
func (l *Library) DeviceGetTotalEccErrors(h uintptr, errType, counter int32, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetTotalEccErrors", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetTotalEccErrors(nvml.MemoryErrorType(errType), nvml.EccCounterType(counter))
		return store(p, v, ret)
	})
}

// DeviceGetFieldValues is nvmlDeviceGetFieldValues; the sim answers
// FI_DEV_GET_GPU_RECOVERY_ACTION and marks other fields not supported.
func (l *Library) DeviceGetFieldValues(h uintptr, count int32, values unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetFieldValues", h, func(d nvml.Device) nvml.Return {
		if count <= 0 || values == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return d.GetFieldValues(unsafe.Slice((*nvml.FieldValue)(values), count))
	})
}

// EventSetCreate is nvmlEventSetCreate.
func (l *Library) EventSetCreate(p unsafe.Pointer) (ret nvml.Return) {
	defer l.recoverPanic("nvmlEventSetCreate", &ret)
	s, ret := l.enter("nvmlEventSetCreate")
	if ret != nvml.SUCCESS {
		return ret
	}
	if p == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	set, ret := s.srv.EventSetCreate()
	if ret != nvml.SUCCESS {
		return ret
	}
	serial := l.setSerial.Add(1)
	h, ret := l.newHandle(key{kind: kindEventSet, set: serial})
	if ret != nvml.SUCCESS {
		_ = set.Free()
		return ret
	}
	l.eventSets.Store(serial, set)
	return store(p, h, nvml.SUCCESS)
}

// EventSetFree is nvmlEventSetFree.
func (l *Library) EventSetFree(h uintptr) (ret nvml.Return) {
	defer l.recoverPanic("nvmlEventSetFree", &ret)
	if _, ret := l.enter("nvmlEventSetFree"); ret != nvml.SUCCESS {
		return ret
	}
	set, ret := l.eventSet(h)
	if ret != nvml.SUCCESS {
		return ret
	}
	ret = set.Free()
	if k, ok := l.handles.lookup(h); ok {
		l.eventSets.Delete(k.set)
	}
	l.handles.release(h)
	return ret
}

// DeviceRegisterEvents is nvmlDeviceRegisterEvents.
func (l *Library) DeviceRegisterEvents(h uintptr, types uint64, seth uintptr) nvml.Return {
	return l.onDevice("nvmlDeviceRegisterEvents", h, func(d nvml.Device) nvml.Return {
		set, ret := l.eventSet(seth)
		if ret != nvml.SUCCESS {
			return ret
		}
		return d.RegisterEvents(types, set)
	})
}

// EventSetWait is nvmlEventSetWait(_v2): waits up to timeoutMs for an
// event of a registered GPU.
func (l *Library) EventSetWait(name string, h uintptr, data unsafe.Pointer, timeoutMs uint32) (ret nvml.Return) {
	defer l.recoverPanic(name, &ret)
	if _, ret := l.enter(name); ret != nvml.SUCCESS {
		return ret
	}
	set, ret := l.eventSet(h)
	if ret != nvml.SUCCESS {
		return ret
	}
	if data == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	ev, ret := set.Wait(timeoutMs)
	if ret != nvml.SUCCESS {
		return ret
	}
	dev, ret := l.deviceHandle(ev.Device)
	return store(data, cEventData{
		Device: dev, EventType: ev.EventType, EventData: ev.EventData,
		GpuInstanceId: ev.GpuInstanceId, ComputeInstanceId: ev.ComputeInstanceId,
	}, ret)
}
