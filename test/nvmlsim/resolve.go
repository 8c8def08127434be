package nvmlsim

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/sim"
)

// Handles to sim objects and back (see handles.go). Every resolution goes
// through the nvml.Interface of the current session's sim.Server.

// device resolves a GPU or MIG device handle.
func (l *Library) device(s *session, h uintptr) (nvml.Device, nvml.Return) {
	k, ok := l.handles.lookup(h)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	switch k.kind {
	case kindGPU:
		return gpuByIndex(s, k.gpu)
	case kindMIGDevice:
		return migDevice(s, k)
	}
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

func gpuByIndex(s *session, index int) (nvml.Device, nvml.Return) {
	d, ret := s.srv.DeviceGetHandleByIndex(index)
	switch ret {
	case nvml.SUCCESS:
		return d, nvml.SUCCESS
	case nvml.ERROR_GPU_IS_LOST:
		// The handle stays valid; every call on a lost GPU, and on its
		// MIG devices and instances, answers this.
		return nil, ret
	}
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

// migDevice finds the MIG device of compute instance k.ci in GPU instance
// k.gi of GPU k.gpu.
func migDevice(s *session, k key) (nvml.Device, nvml.Return) {
	parent, ret := gpuByIndex(s, k.gpu)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	n, ret := parent.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	for i := 0; i < n; i++ {
		m, ret := parent.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			break
		}
		gi, r1 := m.GetGpuInstanceId()
		ci, r2 := m.GetComputeInstanceId()
		if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS && uint32(gi) == k.gi && uint32(ci) == k.ci {
			return m, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_INVALID_ARGUMENT // destroyed
}

func (l *Library) gpuInstance(s *session, h uintptr) (nvml.GpuInstance, nvml.Return) {
	k, ok := l.handles.lookup(h)
	if !ok || k.kind != kindGPUInstance {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return gpuInstanceByKey(s, k)
}

func gpuInstanceByKey(s *session, k key) (nvml.GpuInstance, nvml.Return) {
	parent, ret := gpuByIndex(s, k.gpu)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	gi, ret := parent.GetGpuInstanceById(int(k.gi))
	if ret != nvml.SUCCESS {
		return nil, nvml.ERROR_INVALID_ARGUMENT // destroyed, or MIG disabled
	}
	return gi, nvml.SUCCESS
}

func (l *Library) computeInstance(s *session, h uintptr) (nvml.ComputeInstance, nvml.Return) {
	k, ok := l.handles.lookup(h)
	if !ok || k.kind != kindComputeInstance {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	gi, ret := gpuInstanceByKey(s, k)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	ci, ret := gi.GetComputeInstanceById(int(k.ci))
	if ret != nvml.SUCCESS {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return ci, nvml.SUCCESS
}

func (l *Library) eventSet(h uintptr) (nvml.EventSet, nvml.Return) {
	k, ok := l.handles.lookup(h)
	if !ok || k.kind != kindEventSet {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	set, ok := l.eventSets.Load(k.set)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return set.(nvml.EventSet), nvml.SUCCESS
}

// deviceHandle returns the handle of a GPU or MIG device of the sim. It
// asks the sim (sim.KeyOf), not NVML: a lost GPU answers no call but must
// still be named, e.g. in the event of its XID 79.
func (l *Library) deviceHandle(d nvml.Device) (uintptr, nvml.Return) {
	k, ok := sim.KeyOf(d)
	if !ok {
		return 0, nvml.ERROR_UNKNOWN
	}
	if !k.MIG {
		return l.newHandle(key{kind: kindGPU, gpu: k.GPU})
	}
	return l.newHandle(key{kind: kindMIGDevice, gpu: k.GPU, gi: k.GPUInstance, ci: k.ComputeInstance})
}

func (l *Library) gpuInstanceHandle(gi nvml.GpuInstance) (uintptr, nvml.Return) {
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	idx, ret := info.Device.GetIndex()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return l.newHandle(key{kind: kindGPUInstance, gpu: idx, gi: info.Id})
}

func (l *Library) computeInstanceHandle(ci nvml.ComputeInstance) (uintptr, nvml.Return) {
	info, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	idx, ret := info.Device.GetIndex()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	giInfo, ret := info.GpuInstance.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return l.newHandle(key{kind: kindComputeInstance, gpu: idx, gi: giInfo.Id, ci: info.Id})
}

func (l *Library) newHandle(k key) (uintptr, nvml.Return) {
	h := l.handles.handle(k)
	if h == 0 {
		return 0, nvml.ERROR_MEMORY
	}
	return h, nvml.SUCCESS
}
