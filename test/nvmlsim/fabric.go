package nvmlsim

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/sim"
)

// NVLink fabric information (test/sim/fabric.go).

// DeviceGetGpuFabricInfo is nvmlDeviceGetGpuFabricInfo (nvmlGpuFabricInfo_t,
// without a version field).
func (l *Library) DeviceGetGpuFabricInfo(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetGpuFabricInfo", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetGpuFabricInfo()
		return store(p, v, ret)
	})
}

// DeviceGetGpuFabricInfoV is nvmlDeviceGetGpuFabricInfoV: the caller's
// version field picks the struct, v2 (nvmlGpuFabricInfo_v2_t) or v3
// (nvmlGpuFabricInfo_v3_t); sim answers which versions its driver accepts.
// A profile whose driver predates the call answers
// ERROR_FUNCTION_NOT_FOUND (the symbol itself cannot be withdrawn from the
// built library).
func (l *Library) DeviceGetGpuFabricInfoV(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onSessionDevice("nvmlDeviceGetGpuFabricInfoV", h, func(s *session, d nvml.Device) nvml.Return {
		if s.srv.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfoV") != nil {
			return nvml.ERROR_FUNCTION_NOT_FOUND
		}
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		f, ok := d.(sim.FabricInfoV)
		if !ok {
			return nvml.ERROR_NOT_SUPPORTED // a MIG device
		}
		v, ret := f.GpuFabricInfoV(*(*uint32)(p))
		if ret != nvml.SUCCESS {
			return ret
		}
		if v.Version == sim.FabricInfoV2 {
			return store(p, nvml.GpuFabricInfo_v2{Version: v.Version, ClusterUuid: v.ClusterUuid, Status: v.Status,
				CliqueId: v.CliqueId, State: v.State, HealthMask: v.HealthMask}, nvml.SUCCESS)
		}
		return store(p, v, nvml.SUCCESS)
	})
}

// DeviceGetAddressingMode is nvmlDeviceGetAddressingMode; the caller sets
// the struct version (v1). A profile whose driver predates the call
// answers ERROR_FUNCTION_NOT_FOUND (test/sim/addressing.go).
func (l *Library) DeviceGetAddressingMode(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice(sim.AddressingModeSymbol, h, func(d nvml.Device) nvml.Return {
		if ret := checkVersion(p, sim.AddressingModeV1); ret != nvml.SUCCESS {
			return ret
		}
		v, ret := d.GetAddressingMode()
		return store(p, v, ret)
	})
}
