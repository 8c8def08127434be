package fidelity

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Call makes one NVML call of the table, as the plugin makes it, on the
// GPU dev (index idx) of lib, and returns NVML's code.
type Call func(lib nvml.Interface, dev nvml.Device, idx int) nvml.Return

// calls are the table's calls this package can make, keyed by go-nvml's
// name (the table's C name without "nvml"). Every one only reads: a real
// GPU answers them without a change to any setting (no Set*, Create*,
// Destroy*, Reset*, Register*; TestCallsOnlyRead checks the names), so the
// GPU kit may make them all.
var calls = map[string]Call{
	"SystemGetDriverVersion": func(l nvml.Interface, _ nvml.Device, _ int) nvml.Return { _, r := l.SystemGetDriverVersion(); return r },
	"SystemGetCudaDriverVersion": func(l nvml.Interface, _ nvml.Device, _ int) nvml.Return {
		_, r := l.SystemGetCudaDriverVersion()
		return r
	},
	"DeviceGetCount": func(l nvml.Interface, _ nvml.Device, _ int) nvml.Return { _, r := l.DeviceGetCount(); return r },
	"DeviceGetHandleByIndex": func(l nvml.Interface, _ nvml.Device, i int) nvml.Return {
		_, r := l.DeviceGetHandleByIndex(i)
		return r
	},
	"DeviceGetHandleByUUID": func(l nvml.Interface, d nvml.Device, _ int) nvml.Return {
		id, r := d.GetUUID()
		if r != nvml.SUCCESS {
			return r
		}
		_, r = l.DeviceGetHandleByUUID(id)
		return r
	},
	"DeviceGetUUID":        onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetUUID(); return r }),
	"DeviceGetMinorNumber": onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetMinorNumber(); return r }),
	"DeviceGetName":        onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetName(); return r }),
	"DeviceGetBrand":       onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetBrand(); return r }),
	"DeviceGetArchitecture": onDevice(func(d nvml.Device) nvml.Return {
		_, r := d.GetArchitecture()
		return r
	}),
	"DeviceGetCudaComputeCapability": onDevice(func(d nvml.Device) nvml.Return {
		_, _, r := d.GetCudaComputeCapability()
		return r
	}),
	"DeviceGetMemoryInfo":    onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetMemoryInfo(); return r }),
	"DeviceGetMemoryInfo_v2": onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetMemoryInfo_v2(); return r }),
	"DeviceGetPciInfo":       onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetPciInfo(); return r }),
	"DeviceGetNumaNodeId":    onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetNumaNodeId(); return r }),
	"DeviceGetEccMode":       onDevice(func(d nvml.Device) nvml.Return { _, _, r := d.GetEccMode(); return r }),
	"DeviceGetMigMode":       onDevice(func(d nvml.Device) nvml.Return { _, _, r := d.GetMigMode(); return r }),
	"DeviceGetP2PStatus": onDevice(func(d nvml.Device) nvml.Return {
		_, r := d.GetP2PStatus(d, nvml.P2P_CAPS_INDEX_NVLINK)
		return r
	}),
	"DeviceGetUtilizationRates": onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetUtilizationRates(); return r }),
	"DeviceGetPowerUsage":       onDevice(func(d nvml.Device) nvml.Return { _, r := d.GetPowerUsage(); return r }),
	"DeviceGetEnforcedPowerLimit": onDevice(func(d nvml.Device) nvml.Return {
		_, r := d.GetEnforcedPowerLimit()
		return r
	}),
	"DeviceGetTemperature": onDevice(func(d nvml.Device) nvml.Return {
		_, r := d.GetTemperature(nvml.TEMPERATURE_GPU)
		return r
	}),
	"DeviceGetClockInfo": onDevice(func(d nvml.Device) nvml.Return {
		_, r := d.GetClockInfo(nvml.CLOCK_SM)
		return r
	}),
	"DeviceGetMaxClockInfo": onDevice(func(d nvml.Device) nvml.Return {
		_, r := d.GetMaxClockInfo(nvml.CLOCK_SM)
		return r
	}),
	"DeviceGetCurrentClocksEventReasons": onDevice(func(d nvml.Device) nvml.Return {
		_, r := d.GetCurrentClocksEventReasons()
		return r
	}),
	"DeviceGetGpuFabricInfo": func(l nvml.Interface, d nvml.Device, _ int) nvml.Return {
		if l.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfo") != nil {
			return nvml.ERROR_FUNCTION_NOT_FOUND
		}
		_, r := d.GetGpuFabricInfo()
		return r
	},
	"DeviceGetGpuFabricInfoV": fabricInfoV2,
	"DeviceGetModuleId": func(l nvml.Interface, d nvml.Device, _ int) nvml.Return {
		if l.Extensions().LookupSymbol("nvmlDeviceGetModuleId") != nil {
			return nvml.ERROR_FUNCTION_NOT_FOUND
		}
		_, r := d.GetModuleId()
		return r
	},
	"GpmQueryDeviceSupport": func(l nvml.Interface, d nvml.Device, _ int) nvml.Return {
		_, r := l.GpmQueryDeviceSupport(d)
		return r
	},
}

// fabricInfoV2 makes nvmlDeviceGetGpuFabricInfoV with a v2 struct, as
// internal/plugin/discovery does: only where the library has the symbol (a
// call to a function the library lacks kills the process), and through the
// device itself where it answers the call (test/sim's GPUs: go-nvml's
// handler calls the C library).
func fabricInfoV2(l nvml.Interface, d nvml.Device, _ int) nvml.Return {
	if l.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfoV") != nil {
		return nvml.ERROR_FUNCTION_NOT_FOUND
	}
	type fabricInfoV interface {
		GpuFabricInfoV(version uint32) (nvml.GpuFabricInfo_v3, nvml.Return)
	}
	if f, ok := d.(fabricInfoV); ok {
		_, r := f.GpuFabricInfoV(nvml.STRUCT_VERSION(nvml.GpuFabricInfo_v2{}, 2))
		return r
	}
	_, r := d.GetGpuFabricInfoV().V2()
	return r
}

func onDevice(f func(nvml.Device) nvml.Return) Call {
	return func(_ nvml.Interface, d nvml.Device, _ int) nvml.Return { return f(d) }
}

// CallFor is the call of a row's call column ("nvmlDeviceGetName" or
// "DeviceGetName"), or false when the row is not one this package can
// make (a call that changes state, or one whose arguments the row leaves
// open).
func CallFor(column string) (Call, bool) {
	c, ok := calls[strings.TrimPrefix(column, "nvml")]
	return c, ok
}

// CallNames are the names of the calls this package makes.
func CallNames() []string {
	out := make([]string, 0, len(calls))
	for n := range calls {
		out = append(out, n)
	}
	return out
}
