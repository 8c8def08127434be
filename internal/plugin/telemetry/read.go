package telemetry

import (
	"context"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// Fields of a reading, named after their metrics without the prefix.
const (
	fieldUtilization = "utilization_ratio"
	fieldMemoryUsed  = "memory_used_bytes"
	fieldMemoryTotal = "memory_total_bytes"
	fieldPower       = "power_watts"
	fieldPowerLimit  = "power_limit_watts"
	fieldTemperature = "temperature_celsius"
	fieldSMClock     = "sm_clock_hertz"
	fieldSMClockMax  = "sm_clock_max_hertz"
	fieldReasons     = "throttle_reasons" // not a gauge: see throttleReasons
)

// reading is what one device answered: a value per field it supports.
type reading map[string]float64

// Optional NVML functions: newer than some drivers still in use.
const (
	symClocksEventReasons    = "nvmlDeviceGetCurrentClocksEventReasons" // R535
	symClocksThrottleReasons = "nvmlDeviceGetCurrentClocksThrottleReasons"
)

// gpmSymbols are the GPM functions the per-MIG utilization needs (R520).
var gpmSymbols = []string{"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
	"nvmlGpmMigSampleGet", "nvmlGpmMetricsGet"}

// reader reads devices through NVML. Only the sampling goroutine uses it.
type reader struct {
	lib nvml.Interface
	// reasons reads the clocks event reasons; nil when the library has
	// neither function.
	reasons func(nvml.Device) (uint64, nvml.Return)
	gpm     bool // the library has the GPM functions
	handles map[string]nvml.Device
	// migGPM is the GPM state of each MIG device, by UUID.
	migGPM map[string]*migSamples
	// gpmSupport caches GpmQueryDeviceSupport per physical GPU UUID.
	gpmSupport map[string]bool
	// noted is the last return logged per UUID and field.
	noted map[string]nvml.Return
}

// migSamples are the two GPM samples of a MIG device: prev holds the
// previous sample (once filled), next receives the new one.
type migSamples struct {
	prev, next nvml.GpmSample
	filled     bool
}

func newReader(lib nvml.Interface) *reader {
	r := &reader{lib: lib, handles: map[string]nvml.Device{}, migGPM: map[string]*migSamples{},
		gpmSupport: map[string]bool{}, noted: map[string]nvml.Return{}}
	has := func(sym string) bool { return lib.Extensions().LookupSymbol(sym) == nil }
	switch {
	case has(symClocksEventReasons):
		r.reasons = func(d nvml.Device) (uint64, nvml.Return) { return d.GetCurrentClocksEventReasons() }
	case has(symClocksThrottleReasons):
		r.reasons = func(d nvml.Device) (uint64, nvml.Return) { return d.GetCurrentClocksThrottleReasons() }
	}
	r.gpm = true
	for _, sym := range gpmSymbols {
		r.gpm = r.gpm && has(sym)
	}
	return r
}

// read samples one device; false when the device cannot be read at all
// (gone, lost).
func (r *reader) read(ctx context.Context, d Device) (reading, bool) {
	h, ok := r.handle(ctx, d)
	if !ok {
		return nil, false
	}
	out := reading{}
	mem, ret := h.GetMemoryInfo()
	if !r.ok(ctx, d, "memory", ret) {
		if ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_INVALID_ARGUMENT {
			delete(r.handles, d.UUID) // looked up again next time
			return nil, false
		}
	} else {
		out[fieldMemoryUsed], out[fieldMemoryTotal] = float64(mem.Used), float64(mem.Total)
	}
	if d.MIGProfile != "" {
		if u, ok := r.migUtilization(ctx, d, h); ok {
			out[fieldUtilization] = u
		}
		return out, true
	}
	if u, ret := h.GetUtilizationRates(); r.ok(ctx, d, "utilization", ret) {
		out[fieldUtilization] = float64(u.Gpu) / 100
	}
	if p, ret := h.GetPowerUsage(); r.ok(ctx, d, "power", ret) {
		out[fieldPower] = float64(p) / 1000
	}
	if p, ret := h.GetEnforcedPowerLimit(); r.ok(ctx, d, "power limit", ret) {
		out[fieldPowerLimit] = float64(p) / 1000
	}
	if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); r.ok(ctx, d, "temperature", ret) {
		out[fieldTemperature] = float64(t)
	}
	if c, ret := h.GetClockInfo(nvml.CLOCK_SM); r.ok(ctx, d, "SM clock", ret) {
		out[fieldSMClock] = float64(c) * 1e6
	}
	if c, ret := h.GetMaxClockInfo(nvml.CLOCK_SM); r.ok(ctx, d, "max SM clock", ret) {
		out[fieldSMClockMax] = float64(c) * 1e6
	}
	if r.reasons != nil {
		if v, ret := r.reasons(h); r.ok(ctx, d, "clocks event reasons", ret) {
			out[fieldReasons] = float64(v) // a bit mask below 2^53
		}
	}
	return out, true
}

func (r *reader) handle(ctx context.Context, d Device) (nvml.Device, bool) {
	if h, ok := r.handles[d.UUID]; ok {
		return h, true
	}
	h, ret := r.lib.DeviceGetHandleByUUID(d.UUID)
	if !r.ok(ctx, d, "handle", ret) {
		return nil, false
	}
	r.handles[d.UUID] = h
	return h, true
}

// ok reports whether ret is SUCCESS. Anything else leaves the field out of
// the sample; it is logged once per device, field and answer: NOT_SUPPORTED
// at verbosity 2 (the hardware or driver lacks it), other errors as errors.
func (r *reader) ok(ctx context.Context, d Device, field string, ret nvml.Return) bool {
	key := d.UUID + "/" + field
	if ret == nvml.SUCCESS {
		delete(r.noted, key)
		return true
	}
	if prev, seen := r.noted[key]; seen && prev == ret {
		return false
	}
	r.noted[key] = ret
	logger := klog.FromContext(ctx)
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED:
		logger.V(2).Info("GPU telemetry field not supported; its series is left out", "device", d.Name, "uuid", d.UUID, "field", field)
	case nvml.ERROR_NOT_FOUND:
		logger.V(2).Info("Device not found for telemetry", "device", d.Name, "uuid", d.UUID, "field", field)
	default:
		logger.Error(ret, "Reading GPU telemetry failed; the field is left out", "device", d.Name, "uuid", d.UUID, "field", field)
	}
	return false
}

// migUtilization is the MIG device's utilization between this sample and
// the last, from GPM; false on the first sample and where GPM is missing.
func (r *reader) migUtilization(ctx context.Context, d Device, h nvml.Device) (float64, bool) {
	if !r.gpm {
		return 0, false
	}
	parent, ret := h.GetDeviceHandleFromMigDeviceHandle()
	if !r.ok(ctx, d, "parent GPU", ret) {
		return 0, false
	}
	gi, ret := h.GetGpuInstanceId()
	if !r.ok(ctx, d, "GPU instance ID", ret) {
		return 0, false
	}
	parentUUID, ret := parent.GetUUID()
	if !r.ok(ctx, d, "parent UUID", ret) {
		return 0, false
	}
	supported, known := r.gpmSupport[parentUUID]
	if !known {
		s, ret := r.lib.GpmQueryDeviceSupport(parent)
		supported = ret == nvml.SUCCESS && s.IsSupportedDevice != 0
		if ret == nvml.SUCCESS && !supported {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
		r.ok(ctx, d, "GPM", ret)
		r.gpmSupport[parentUUID] = supported
	}
	if !supported {
		return 0, false
	}
	st := r.migGPM[d.UUID]
	if st == nil {
		st = &migSamples{}
		for _, p := range []*nvml.GpmSample{&st.prev, &st.next} {
			if *p, ret = r.lib.GpmSampleAlloc(); !r.ok(ctx, d, "GPM sample", ret) {
				st.free(r.lib)
				return 0, false
			}
		}
		r.migGPM[d.UUID] = st
	}
	if ret := r.lib.GpmMigSampleGet(parent, gi, st.next); !r.ok(ctx, d, "GPM MIG sample", ret) {
		st.filled = false
		return 0, false
	}
	first := !st.filled
	st.prev, st.next, st.filled = st.next, st.prev, true
	if first {
		return 0, false
	}
	mg := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: 1, Sample1: st.next, Sample2: st.prev}
	mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
	if ret := r.lib.GpmMetricsGet(mg); !r.ok(ctx, d, "GPM metrics", ret) ||
		!r.ok(ctx, d, "GPM graphics utilization", nvml.Return(mg.Metrics[0].NvmlReturn)) {
		return 0, false
	}
	return min(max(mg.Metrics[0].Value/100, 0), 1), true
}

func (st *migSamples) free(lib nvml.Interface) {
	for _, s := range []nvml.GpmSample{st.prev, st.next} {
		if s != nil {
			_ = lib.GpmSampleFree(s)
		}
	}
}

// forget drops the handles and GPM samples of devices that are gone.
func (r *reader) forget(seen map[string]bool) {
	for uuid := range r.handles {
		if !seen[uuid] {
			delete(r.handles, uuid)
		}
	}
	for uuid, st := range r.migGPM {
		if !seen[uuid] {
			st.free(r.lib)
			delete(r.migGPM, uuid)
		}
	}
	for key := range r.noted {
		if uuid, _, _ := strings.Cut(key, "/"); !seen[uuid] {
			delete(r.noted, key)
		}
	}
}

// close frees every GPM sample.
func (r *reader) close() { r.forget(nil) }
