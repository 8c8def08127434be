package sim

import (
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Telemetry of the simulated GPUs. A device (GPU or MIG device) is idle
// until a process uses it (processes.go); then:
//
//   - utilization follows a deterministic curve of time that differs per
//     set of processes: a base level between 55% and 85%, a slow wave
//     (±10%, period 90 s) and a fast one (±4%, period 11 s), +8% per
//     process beyond the first, within 2%..100%;
//   - each process holds 30%..70% of the device's memory (fixed per
//     process), at most 95% of it in all;
//   - a physical GPU's power is idle + (limit - idle) × 1.08 × utilization;
//     above the limit it is held at the limit, the SM clock drops by the
//     same ratio and the clocks event reasons report a software power cap;
//     idle GPUs report the idle clock and the "GPU idle" reason;
//   - its temperature is 29..32 °C idle plus 50 °C at full load;
//   - a "thermal" fault (fault file) throttles it: 91 °C, half the SM clock,
//     3/4 of the power, hardware and software thermal slowdown reasons.
//
// Like real NVML, a GPU in MIG mode answers nvmlDeviceGetUtilizationRates
// with NOT_SUPPORTED (GPM gives per-MIG utilization on Hopper, gpm.go); its
// power, temperature and clocks follow the load of its MIG devices,
// weighted by their compute slices; its memory use is theirs. MIG devices
// answer memory queries with their own use and power, temperature and
// clock queries with NOT_SUPPORTED. Models without power or clock figures
// (Model.Power, Model.SMClock) answer those queries NOT_SUPPORTED.

// gpuLoad is what a physical GPU is doing at one moment.
type gpuLoad struct {
	util    float64 // 0..1
	busy    bool    // some process uses it (or one of its MIG devices)
	memUsed uint64
	thermal bool
}

// curve is the utilization of a device running the processes ids at t.
func curve(ids []string, t time.Time) float64 {
	if len(ids) == 0 {
		return 0
	}
	h := hash64(strings.Join(ids, ","))
	base := 0.55 + 0.30*unit(h)
	slow := 2 * math.Pi * float64(h>>16%1000) / 1000
	fast := 2 * math.Pi * float64(h>>32%1000) / 1000
	sec := float64(t.UnixNano()) / 1e9
	u := base + 0.10*math.Sin(2*math.Pi*sec/90+slow) + 0.04*math.Sin(2*math.Pi*sec/11+fast) + 0.08*float64(len(ids)-1)
	return min(max(u, 0.02), 1)
}

// memoryUsed is the memory the processes ids hold on a device of total
// bytes, rounded down to MiB.
func memoryUsed(ids []string, total uint64) uint64 {
	frac := 0.0
	for _, id := range ids {
		frac += 0.30 + 0.40*unit(hash64("memory/"+id))
	}
	used := uint64(math.Min(frac, 0.95) * float64(total))
	return used / mib * mib
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h%1000) / 1000 }

func percent(u float64) uint32 { return uint32(math.Round(u * 100)) }

// migLoad is the utilization and memory use of a MIG device at t.
func (m *migDevice) migLoad(t time.Time) (float64, uint64) {
	ids := m.ci.gi.dev.srv.procs.processesOn(m.uuid)
	return curve(ids, t), memoryUsed(ids, m.ci.gi.prof.MemoryMiB*mib)
}

// load is what the GPU is doing at t.
func (d *device) load(t time.Time) gpuLoad {
	var l gpuLoad
	d.srv.faults.mu.Lock()
	l.thermal = d.srv.faults.gpus[d].thermal
	d.srv.faults.mu.Unlock()
	d.srv.mu.Lock()
	migMode := d.migMode == nvml.DEVICE_MIG_ENABLE
	var migs []*migDevice
	if migMode {
		migs = d.migDevicesLocked()
	}
	d.srv.mu.Unlock()
	if !migMode {
		ids := d.srv.procs.processesOn(d.uuid)
		l.util, l.busy, l.memUsed = curve(ids, t), len(ids) > 0, memoryUsed(ids, d.model().MemoryBytes)
		return l
	}
	slices := float64(d.model().MIG.ComputeSlices)
	for _, m := range migs {
		u, used := m.migLoad(t)
		l.util += u * float64(m.ci.prof.slices) / slices
		l.busy = l.busy || u > 0
		l.memUsed += used
	}
	l.util = min(l.util, 1)
	return l
}

// powerAndClock returns the power draw in mW, the SM clock in MHz and the
// clocks event reasons of a GPU under load l; power or clock is -1 when the
// model does not describe it.
func (d *device) powerAndClock(l gpuLoad) (power, clock int64, reasons uint64) {
	m := d.model()
	power, clock = -1, -1
	factor := 1.0
	if p := m.Power; p != nil {
		demand := float64(p.IdleWatts) + float64(p.LimitWatts-p.IdleWatts)*1.08*l.util
		if demand > float64(p.LimitWatts) {
			factor = float64(p.LimitWatts) / demand
			demand = float64(p.LimitWatts)
			reasons |= nvml.ClocksEventReasonSwPowerCap
		}
		if l.thermal {
			demand *= 0.75
		}
		power = int64(math.Round(demand * 1000))
	}
	if l.thermal {
		factor = 0.5
		reasons |= nvml.ClocksThrottleReasonHwThermalSlowdown | nvml.ClocksEventReasonSwThermalSlowdown
	}
	if !l.busy {
		reasons |= nvml.ClocksEventReasonGpuIdle
	}
	if c := m.SMClock; c != nil {
		clock = int64(c.IdleMHz)
		if l.busy {
			clock = int64(math.Round(float64(c.MaxMHz) * factor))
		}
	}
	return power, clock, reasons
}

// temperature in °C of a GPU under load l.
func (d *device) temperature(l gpuLoad) uint32 {
	if l.thermal {
		return 91
	}
	return uint32(29 + d.gpu.Index%4 + int(math.Round(50*l.util)))
}

// setTelemetryFuncs sets the GPU's telemetry calls (finishHandle guards them
// while it is lost).
func (d *device) setTelemetryFuncs() {
	m := d.model()
	now := func() gpuLoad { return d.load(d.srv.clock()) }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if d.migEnabled() {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
		l := now()
		return nvml.Utilization{Gpu: percent(l.util), Memory: percent(0.45 * l.util)}, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		used := now().memUsed
		return nvml.Memory{Total: m.MemoryBytes, Used: used, Free: m.MemoryBytes - used}, nvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		used := now().memUsed
		return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: m.MemoryBytes, Used: used,
			Free: m.MemoryBytes - used}, nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
		if sensor != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return d.temperature(now()), nvml.SUCCESS
	}
	if m.Power != nil {
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
			p, _, _ := d.powerAndClock(now())
			return uint32(p), nvml.SUCCESS
		}
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return uint32(m.Power.LimitWatts * 1000), nvml.SUCCESS }
	}
	if m.SMClock != nil {
		d.GetClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) {
			if ct != nvml.CLOCK_SM && ct != nvml.CLOCK_GRAPHICS {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			_, c, _ := d.powerAndClock(now())
			return uint32(c), nvml.SUCCESS
		}
		d.GetMaxClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) {
			if ct != nvml.CLOCK_SM && ct != nvml.CLOCK_GRAPHICS {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return uint32(m.SMClock.MaxMHz), nvml.SUCCESS
		}
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
		_, _, r := d.powerAndClock(now())
		return r, nvml.SUCCESS
	}
	d.GetCurrentClocksThrottleReasonsFunc = d.GetCurrentClocksEventReasonsFunc
}

func (d *device) migEnabled() bool {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	return d.migMode == nvml.DEVICE_MIG_ENABLE
}

// SetThermal starts (or ends) thermal throttling of the GPU, as a failed
// fan or a blocked air flow would cause. Reset ends it too.
func (s *Server) SetThermal(gpuUUID string, on bool) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.gpus[d].thermal = on
	return nil
}
