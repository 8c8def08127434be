package sim

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// GPU Performance Monitoring (GPM), NVML's counters API for Hopper and
// newer GPUs, and the only NVML API that reports utilization per MIG
// device (nvmlGpmMigSampleGet with the GPU instance ID). Modelled:
// GpmQueryDeviceSupport (supported from the Hopper architecture on),
// GpmSampleAlloc/Free, GpmSampleGet (whole GPU), GpmMigSampleGet (one GPU
// instance) and GpmMetricsGet for GPM_METRIC_GRAPHICS_UTIL and
// GPM_METRIC_SM_UTIL: the mean of the load curve (telemetry.go) between
// the two samples, evaluated with the processes that run at the time of
// the call (a process that came or went between the samples counts for the
// whole interval: a simplification). Other metrics answer NOT_SUPPORTED
// in their entry.

// gpmSample is a simulated nvmlGpmSample_t.
type gpmSample struct {
	mock.GpmSample

	mu     sync.Mutex
	freed  bool
	filled bool
	dev    *device
	gi     int // GPU instance ID; -1 for the whole GPU
	at     time.Time
}

var _ nvml.GpmSample = (*gpmSample)(nil)

// smUtilShare is the SM activity of a busy device relative to its
// graphics/compute engine activity.
const smUtilShare = 0.9

func (s *Server) installGPM() {
	s.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return nil, ret
		}
		g := &gpmSample{gi: -1}
		g.FreeFunc = g.free
		g.GetFunc = func(d nvml.Device) nvml.Return { return s.GpmSampleGet(d, g) }
		g.MigGetFunc = func(d nvml.Device, gi int) nvml.Return { return s.GpmMigSampleGet(d, gi, g) }
		return g, nvml.SUCCESS
	}
	s.GpmSampleFreeFunc = func(g nvml.GpmSample) nvml.Return {
		if g == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return g.Free()
	}
	s.GpmQueryDeviceSupportFunc = func(d nvml.Device) (nvml.GpmSupport, nvml.Return) {
		if d == nil {
			return nvml.GpmSupport{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return d.GpmQueryDeviceSupport()
	}
	s.GpmSampleGetFunc = func(d nvml.Device, g nvml.GpmSample) nvml.Return {
		if d == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return d.GpmSampleGet(g)
	}
	s.GpmMigSampleGetFunc = func(d nvml.Device, gi int, g nvml.GpmSample) nvml.Return {
		if d == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return d.GpmMigSampleGet(gi, g)
	}
	s.GpmMetricsGetFunc = s.gpmMetricsGet
	for _, d := range s.devices {
		d.setGPMFuncs()
	}
}

func (g *gpmSample) free() nvml.Return {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	g.freed = true
	return nvml.SUCCESS
}

// gpmSupported: GPM exists from the Hopper architecture on.
func (d *device) gpmSupported() bool {
	return d.model().Architecture >= nvml.DEVICE_ARCH_HOPPER && d.model().Architecture != nvml.DEVICE_ARCH_UNKNOWN
}

func (d *device) setGPMFuncs() {
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		s := nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}
		if d.gpmSupported() {
			s.IsSupportedDevice = 1
		}
		return s, nvml.SUCCESS
	}
	d.GpmSampleGetFunc = func(g nvml.GpmSample) nvml.Return { return d.fillSample(g, -1) }
	d.GpmMigSampleGetFunc = func(gi int, g nvml.GpmSample) nvml.Return {
		if gi < 0 {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return d.fillSample(g, gi)
	}
}

func (d *device) fillSample(sample nvml.GpmSample, gi int) nvml.Return {
	g, ok := sample.(*gpmSample)
	if !ok || g == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.gpmSupported() {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if gi >= 0 {
		d.srv.mu.Lock()
		_, exists := d.gis[uint32(gi)]
		migMode := d.migMode == nvml.DEVICE_MIG_ENABLE
		d.srv.mu.Unlock()
		if !migMode {
			return nvml.ERROR_NOT_SUPPORTED
		}
		if !exists {
			return nvml.ERROR_NOT_FOUND
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	g.filled, g.dev, g.gi, g.at = true, d, gi, d.srv.clock()
	return nvml.SUCCESS
}

func (g *gpmSample) state() (filled bool, dev *device, gi int, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.filled && !g.freed, g.dev, g.gi, g.at
}

func (s *Server) gpmMetricsGet(mg *nvml.GpmMetricsGetType) nvml.Return {
	if mg == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if mg.Version != nvml.GPM_METRICS_GET_VERSION {
		return nvml.ERROR_ARGUMENT_VERSION_MISMATCH
	}
	if mg.NumMetrics == 0 || int(mg.NumMetrics) > len(mg.Metrics) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s1, ok1 := mg.Sample1.(*gpmSample)
	s2, ok2 := mg.Sample2.(*gpmSample)
	if !ok1 || !ok2 || s1 == nil || s2 == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	f1, d1, gi1, t1 := s1.state()
	f2, d2, gi2, t2 := s2.state()
	if !f1 || !f2 || d1 != d2 || gi1 != gi2 || !t2.After(t1) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	mean := d1.meanUtil(gi1, t1, t2)
	for i := range mg.Metrics[:mg.NumMetrics] {
		m := &mg.Metrics[i]
		switch nvml.GpmMetricId(m.MetricId) {
		case nvml.GPM_METRIC_GRAPHICS_UTIL:
			m.Value, m.NvmlReturn = 100*mean, uint32(nvml.SUCCESS)
		case nvml.GPM_METRIC_SM_UTIL:
			m.Value, m.NvmlReturn = 100*mean*smUtilShare, uint32(nvml.SUCCESS)
		default:
			m.Value, m.NvmlReturn = 0, uint32(nvml.ERROR_NOT_SUPPORTED)
		}
	}
	return nvml.SUCCESS
}

// meanUtil is the mean utilization of the GPU (gi < 0) or of GPU instance
// gi between t1 and t2, with the processes that run now.
func (d *device) meanUtil(gi int, t1, t2 time.Time) float64 {
	at := func(t time.Time) float64 {
		if gi < 0 {
			return d.load(t).util
		}
		return d.instanceUtil(uint32(gi), t)
	}
	const maxSteps = 600
	span := t2.Sub(t1)
	step := max(time.Second, span/maxSteps)
	sum, n := 0.0, 0
	for t := t1.Add(step / 2); t.Before(t2); t = t.Add(step) {
		sum += at(t)
		n++
	}
	if n == 0 {
		return at(t1.Add(span / 2))
	}
	return sum / float64(n)
}

// instanceUtil is the utilization of GPU instance gi at t: that of its
// compute instances, weighted by their slices.
func (d *device) instanceUtil(gi uint32, t time.Time) float64 {
	d.srv.mu.Lock()
	inst, ok := d.gis[gi]
	var migs []*migDevice
	slices := 1
	if ok {
		slices = inst.prof.Slices
		for _, ci := range inst.sortedCIsLocked() {
			migs = append(migs, ci.mig)
		}
	}
	d.srv.mu.Unlock()
	u := 0.0
	for _, m := range migs {
		mu, _ := m.migLoad(t)
		u += mu * float64(m.ci.prof.slices) / float64(slices)
	}
	return min(u, 1)
}
