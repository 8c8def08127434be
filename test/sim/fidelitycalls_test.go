package sim

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// fidelityCalls make the calls of docs/nvml-fidelity.md on GPU 0 of a
// simulated node, as the plugin makes them, and return NVML's code.
var fidelityCalls = map[string]func(*testing.T, *Server) nvml.Return{
	"nvmlSystemGetDriverVersion":     func(_ *testing.T, s *Server) nvml.Return { _, r := s.SystemGetDriverVersion(); return r },
	"nvmlSystemGetCudaDriverVersion": func(_ *testing.T, s *Server) nvml.Return { _, r := s.SystemGetCudaDriverVersion(); return r },
	"nvmlDeviceGetCount":             func(_ *testing.T, s *Server) nvml.Return { _, r := s.DeviceGetCount(); return r },
	"nvmlDeviceGetHandleByIndex":     func(_ *testing.T, s *Server) nvml.Return { _, r := s.DeviceGetHandleByIndex(0); return r },
	"nvmlDeviceGetHandleByUUID": func(t *testing.T, s *Server) nvml.Return {
		id, _ := gpu0(t, s).GetUUID()
		_, r := s.DeviceGetHandleByUUID(id)
		return r
	},
	"nvmlDeviceGetUUID":        onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetUUID(); return r }),
	"nvmlDeviceGetMinorNumber": onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetMinorNumber(); return r }),
	"nvmlDeviceGetName":        onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetName(); return r }),
	"nvmlDeviceGetBrand":       onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetBrand(); return r }),
	"nvmlDeviceGetArchitecture": onGPU0(func(d nvml.Device) nvml.Return {
		_, r := d.GetArchitecture()
		return r
	}),
	"nvmlDeviceGetCudaComputeCapability": onGPU0(func(d nvml.Device) nvml.Return {
		_, _, r := d.GetCudaComputeCapability()
		return r
	}),
	"nvmlDeviceGetMemoryInfo":    onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetMemoryInfo(); return r }),
	"nvmlDeviceGetMemoryInfo_v2": onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetMemoryInfo_v2(); return r }),
	"nvmlDeviceGetPciInfo":       onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetPciInfo(); return r }),
	"nvmlDeviceGetNumaNodeId":    onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetNumaNodeId(); return r }),
	"nvmlDeviceGetEccMode":       onGPU0(func(d nvml.Device) nvml.Return { _, _, r := d.GetEccMode(); return r }),
	"nvmlDeviceGetMigMode":       onGPU0(func(d nvml.Device) nvml.Return { _, _, r := d.GetMigMode(); return r }),
	"nvmlDeviceGetP2PStatus": onGPU0(func(d nvml.Device) nvml.Return {
		_, r := d.GetP2PStatus(d, nvml.P2P_CAPS_INDEX_NVLINK)
		return r
	}),
	"nvmlDeviceGetUtilizationRates": onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetUtilizationRates(); return r }),
	"nvmlDeviceGetPowerUsage":       onGPU0(func(d nvml.Device) nvml.Return { _, r := d.GetPowerUsage(); return r }),
	"nvmlDeviceGetEnforcedPowerLimit": onGPU0(func(d nvml.Device) nvml.Return {
		_, r := d.GetEnforcedPowerLimit()
		return r
	}),
	"nvmlDeviceGetTemperature": onGPU0(func(d nvml.Device) nvml.Return {
		_, r := d.GetTemperature(nvml.TEMPERATURE_GPU)
		return r
	}),
	"nvmlDeviceGetClockInfo": onGPU0(func(d nvml.Device) nvml.Return {
		_, r := d.GetClockInfo(nvml.CLOCK_SM)
		return r
	}),
	"nvmlDeviceGetMaxClockInfo": onGPU0(func(d nvml.Device) nvml.Return {
		_, r := d.GetMaxClockInfo(nvml.CLOCK_SM)
		return r
	}),
	"nvmlDeviceGetCurrentClocksEventReasons": onGPU0(func(d nvml.Device) nvml.Return {
		_, r := d.GetCurrentClocksEventReasons()
		return r
	}),
	"nvmlGpmQueryDeviceSupport": func(t *testing.T, s *Server) nvml.Return {
		_, r := s.GpmQueryDeviceSupport(gpu0(t, s))
		return r
	},
}

func gpu0(t *testing.T, s *Server) nvml.Device {
	t.Helper()
	d, r := s.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, r)
	return d
}

func onGPU0(f func(nvml.Device) nvml.Return) func(*testing.T, *Server) nvml.Return {
	return func(t *testing.T, s *Server) nvml.Return { return f(gpu0(t, s)) }
}

// TestFidelityDump prints what the simulator answers, for writing rows.
func TestFidelityDump(t *testing.T) {
	if testing.Short() || !testing.Verbose() {
		t.Skip("only with -v")
	}
	for name, call := range fidelityCalls {
		for _, m := range fidelityModels(t, "all,grace,unified-memory") {
			t.Logf("%s %s %s", name, m.name, call(t, m.server(t)))
		}
	}
}
