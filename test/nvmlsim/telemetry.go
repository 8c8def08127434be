package nvmlsim

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Telemetry: utilization, power, clocks, clocks event reasons, and GPM (the
// per-MIG utilization of Hopper GPUs). Temperature and memory are in
// device.go. The values come from the simulator's processes (the session's
// processDir).

// cGpmMetricsGet is nvmlGpmMetricsGet_t with its sample handles as uintptr.
type cGpmMetricsGet struct {
	Version    uint32
	NumMetrics uint32
	Sample1    uintptr
	Sample2    uintptr
	Metrics    [nvml.GPM_METRIC_MAX]nvml.GpmMetric
}

// DeviceGetUtilizationRates is nvmlDeviceGetUtilizationRates.
func (l *Library) DeviceGetUtilizationRates(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetUtilizationRates", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetUtilizationRates()
		return store(p, v, ret)
	})
}

// DeviceGetPowerUsage is nvmlDeviceGetPowerUsage (milliwatts).
func (l *Library) DeviceGetPowerUsage(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetPowerUsage", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetPowerUsage()
		return store(p, v, ret)
	})
}

// DeviceGetEnforcedPowerLimit is nvmlDeviceGetEnforcedPowerLimit (milliwatts).
func (l *Library) DeviceGetEnforcedPowerLimit(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlDeviceGetEnforcedPowerLimit", h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetEnforcedPowerLimit()
		return store(p, v, ret)
	})
}

// DeviceGetClockInfo is nvmlDeviceGetClockInfo and, with max,
// nvmlDeviceGetMaxClockInfo (MHz).
func (l *Library) DeviceGetClockInfo(name string, h uintptr, clockType int32, p unsafe.Pointer) nvml.Return {
	return l.onDevice(name, h, func(d nvml.Device) nvml.Return {
		var v uint32
		var ret nvml.Return
		if name == "nvmlDeviceGetMaxClockInfo" {
			v, ret = d.GetMaxClockInfo(nvml.ClockType(clockType))
		} else {
			v, ret = d.GetClockInfo(nvml.ClockType(clockType))
		}
		return store(p, v, ret)
	})
}

// DeviceGetCurrentClocksEventReasons is nvmlDeviceGetCurrentClocksEventReasons
// and its deprecated name nvmlDeviceGetCurrentClocksThrottleReasons.
func (l *Library) DeviceGetCurrentClocksEventReasons(name string, h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice(name, h, func(d nvml.Device) nvml.Return {
		v, ret := d.GetCurrentClocksEventReasons()
		return store(p, v, ret)
	})
}

// GpmQueryDeviceSupport is nvmlGpmQueryDeviceSupport; the caller sets the
// struct version.
func (l *Library) GpmQueryDeviceSupport(h uintptr, p unsafe.Pointer) nvml.Return {
	return l.onDevice("nvmlGpmQueryDeviceSupport", h, func(d nvml.Device) nvml.Return {
		if ret := checkVersion(p, nvml.GPM_SUPPORT_VERSION); ret != nvml.SUCCESS {
			return ret
		}
		v, ret := d.GpmQueryDeviceSupport()
		return store(p, v, ret)
	})
}

// GpmSampleAlloc is nvmlGpmSampleAlloc: p receives the sample's handle.
func (l *Library) GpmSampleAlloc(p unsafe.Pointer) (ret nvml.Return) {
	defer l.recoverPanic("nvmlGpmSampleAlloc", &ret)
	s, ret := l.enter("nvmlGpmSampleAlloc")
	if ret != nvml.SUCCESS {
		return ret
	}
	if p == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	sample, ret := s.srv.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return ret
	}
	serial := l.sampleSerial.Add(1)
	h, ret := l.newHandle(key{kind: kindGPMSample, set: serial})
	if ret != nvml.SUCCESS {
		_ = sample.Free()
		return ret
	}
	l.gpmSamples.Store(serial, sample)
	return store(p, h, nvml.SUCCESS)
}

// GpmSampleFree is nvmlGpmSampleFree.
func (l *Library) GpmSampleFree(h uintptr) (ret nvml.Return) {
	defer l.recoverPanic("nvmlGpmSampleFree", &ret)
	if _, ret := l.enter("nvmlGpmSampleFree"); ret != nvml.SUCCESS {
		return ret
	}
	sample, ret := l.gpmSample(h)
	if ret != nvml.SUCCESS {
		return ret
	}
	ret = sample.Free()
	if k, ok := l.handles.lookup(h); ok {
		l.gpmSamples.Delete(k.set)
	}
	l.handles.release(h)
	return ret
}

// GpmSampleGet is nvmlGpmSampleGet (gi < 0) and nvmlGpmMigSampleGet.
func (l *Library) GpmSampleGet(name string, h uintptr, gi int, sh uintptr) nvml.Return {
	return l.onDevice(name, h, func(d nvml.Device) nvml.Return {
		sample, ret := l.gpmSample(sh)
		if ret != nvml.SUCCESS {
			return ret
		}
		if gi < 0 {
			return d.GpmSampleGet(sample)
		}
		return d.GpmMigSampleGet(gi, sample)
	})
}

// GpmMetricsGet is nvmlGpmMetricsGet: it computes the requested metrics of
// the two samples into the caller's struct.
func (l *Library) GpmMetricsGet(p unsafe.Pointer) (ret nvml.Return) {
	defer l.recoverPanic("nvmlGpmMetricsGet", &ret)
	s, ret := l.enter("nvmlGpmMetricsGet")
	if ret != nvml.SUCCESS {
		return ret
	}
	if p == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	c := (*cGpmMetricsGet)(p)
	if c.Version != nvml.GPM_METRICS_GET_VERSION {
		return nvml.ERROR_ARGUMENT_VERSION_MISMATCH
	}
	s1, r1 := l.gpmSample(c.Sample1)
	s2, r2 := l.gpmSample(c.Sample2)
	if r1 != nvml.SUCCESS || r2 != nvml.SUCCESS || c.NumMetrics > uint32(len(c.Metrics)) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	mg := &nvml.GpmMetricsGetType{Version: c.Version, NumMetrics: c.NumMetrics, Sample1: s1, Sample2: s2}
	for i := range c.NumMetrics {
		mg.Metrics[i].MetricId = c.Metrics[i].MetricId
	}
	if ret := s.srv.GpmMetricsGet(mg); ret != nvml.SUCCESS {
		return ret
	}
	// Only the results are written: metricInfo stays as the caller left it
	// (NULL, as NVML allows), so no Go pointer reaches C memory.
	for i := range c.NumMetrics {
		c.Metrics[i].NvmlReturn, c.Metrics[i].Value = mg.Metrics[i].NvmlReturn, mg.Metrics[i].Value
	}
	return nvml.SUCCESS
}

func (l *Library) gpmSample(h uintptr) (nvml.GpmSample, nvml.Return) {
	k, ok := l.handles.lookup(h)
	if !ok || k.kind != kindGPMSample {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	sample, ok := l.gpmSamples.Load(k.set)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return sample.(nvml.GpmSample), nvml.SUCCESS
}
