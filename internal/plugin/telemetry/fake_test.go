package telemetry

import (
	"errors"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU is a GPU for the reader: every field answers its value, or the
// return in fail (NOT_SUPPORTED, GPU_IS_LOST, ...).
type fakeGPU struct {
	uuid   string
	fail   map[string]nvml.Return // by field name of read.go
	util   uint32                 // percent
	used   uint64
	total  uint64
	mW     uint32
	limit  uint32
	temp   uint32
	clock  uint32 // MHz
	max    uint32
	events uint64
}

func (f fakeGPU) ret(field string) nvml.Return {
	if r, ok := f.fail[field]; ok {
		return r
	}
	return nvml.SUCCESS
}

func (f fakeGPU) device() *mock.Device {
	return &mock.Device{
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: f.total, Used: f.used, Free: f.total - f.used}, f.ret(fieldMemoryUsed)
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: f.util}, f.ret(fieldUtilization)
		},
		GetPowerUsageFunc:         func() (uint32, nvml.Return) { return f.mW, f.ret(fieldPower) },
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return f.limit, f.ret(fieldPowerLimit) },
		GetTemperatureFunc: func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return f.temp, f.ret(fieldTemperature)
		},
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return f.clock, f.ret(fieldSMClock)
		},
		GetMaxClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return f.max, f.ret(fieldSMClockMax)
		},
		GetCurrentClocksEventReasonsFunc:    func() (uint64, nvml.Return) { return f.events, f.ret(fieldReasons) },
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, nvml.Return) { return f.events | 1<<40, f.ret(fieldReasons) },
	}
}

// fakeLib serves fake GPUs by UUID; missing lists the optional NVML
// symbols its library lacks.
func fakeLib(missing []string, gpus ...fakeGPU) *mock.Interface {
	byUUID := map[string]*mock.Device{}
	for _, g := range gpus {
		byUUID[g.uuid] = g.device()
	}
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(sym string) error {
		for _, m := range missing {
			if m == sym {
				return errors.New("undefined symbol " + sym)
			}
		}
		return nil
	}}
	return &mock.Interface{
		ExtensionsFunc: func() nvml.ExtendedInterface { return ext },
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			for _, g := range gpus {
				if g.uuid == uuid {
					if r := g.ret("handle"); r != nvml.SUCCESS {
						return nil, r
					}
				}
			}
			d, ok := byUUID[uuid]
			if !ok {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return d, nvml.SUCCESS
		},
	}
}

// h100 is a busy fake H100.
func h100(uuid string) fakeGPU {
	return fakeGPU{uuid: uuid, util: 87, used: 30 << 30, total: 80 << 30, mW: 612_500, limit: 700_000, temp: 71,
		clock: 1830, max: 1980, events: 0x4}
}
