package telemetry

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/internal/shared/telemetry/names"
)

// Metric names (internal/shared/telemetry/names), documented in docs/health-and-telemetry.md.
const (
	MetricUtilization    = names.MetricUtilization
	MetricMemoryUsed     = names.MetricMemoryUsed
	MetricMemoryTotal    = names.MetricMemoryTotal
	MetricPower          = names.MetricPower
	MetricPowerLimit     = names.MetricPowerLimit
	MetricTemperature    = names.MetricTemperature
	MetricSMClock        = names.MetricSMClock
	MetricSMClockMax     = names.MetricSMClockMax
	MetricThrottleReason = names.MetricThrottleReason
	MetricXIDs           = names.MetricXIDs
	MetricSampleSeconds  = names.MetricSampleSeconds
)

// gauges maps reading fields to their metric and help text.
var gauges = []struct{ field, name, help string }{
	{fieldUtilization, MetricUtilization, "Fraction of the last sample period during which kernels ran on the device (MIG devices: GPM graphics activity between two samples)."},
	{fieldMemoryUsed, MetricMemoryUsed, "Device memory in use, bytes."},
	{fieldMemoryTotal, MetricMemoryTotal, "Device memory, bytes."},
	{fieldPower, MetricPower, "Power draw of the GPU, watts."},
	{fieldPowerLimit, MetricPowerLimit, "Power limit the GPU enforces, watts."},
	{fieldTemperature, MetricTemperature, "GPU core temperature, degrees Celsius."},
	{fieldSMClock, MetricSMClock, "Current SM clock, hertz."},
	{fieldSMClockMax, MetricSMClockMax, "Highest SM clock of the GPU, hertz."},
}

// throttleReasons are NVML's clocks event reasons (nvmlClocksEventReason*)
// by bit.
var throttleReasons = []struct {
	bit  uint64
	name string
}{
	{0x1, "gpu_idle"}, {0x2, "applications_clocks_setting"}, {0x4, "sw_power_cap"}, {0x8, "hw_slowdown"},
	{0x10, "sync_boost"}, {0x20, "sw_thermal_slowdown"}, {0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"}, {0x100, "display_clock_setting"}, {0x200, "board_limit"}, {0x400, "reliability"},
}

var sampleBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}

type metrics struct {
	node    string
	sampler *Sampler
	descs   map[string]*prometheus.Desc
	reason  *prometheus.Desc
	xids    *prometheus.CounterVec
	sample  prometheus.Histogram
	// names maps GPU UUIDs to device names for the XID counter.
	names map[string]string
}

func newMetrics(node string, s *Sampler) *metrics {
	labels := deviceLabels
	m := &metrics{node: node, sampler: s, descs: map[string]*prometheus.Desc{}, names: map[string]string{}}
	for _, g := range gauges {
		m.descs[g.field] = prometheus.NewDesc(g.name, g.help, labels, nil)
	}
	m.reason = prometheus.NewDesc(MetricThrottleReason,
		"1 while NVML reports this clocks event (throttle) reason for the GPU, else 0; gpu_idle means the GPU has no work.",
		append(append([]string(nil), labels...), "reason"), nil)
	m.xids = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricXIDs,
		Help: "XID errors reported by the driver for the GPU since the plugin started, by XID (ignored ones included)."},
		[]string{names.LabelNode, names.LabelDevice, names.LabelUUID, "xid"})
	m.sample = prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricSampleSeconds,
		Help: "Time to sample the telemetry of every device of the node.", Buckets: sampleBuckets})
	for _, d := range s.cfg.Devices {
		if d.MIGProfile == "" {
			m.names[d.UUID] = d.Name
		}
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m, m.xids, m.sample} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) observeSample(d time.Duration) { m.sample.Observe(d.Seconds()) }

func (m *metrics) xid(uuid string, xid uint64) {
	m.xids.WithLabelValues(m.node, m.names[uuid], uuid, strconv.FormatUint(xid, 10)).Inc()
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
	ch <- m.reason
}

// Collect implements prometheus.Collector: the series of the last sample.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	snap := m.sampler.last.Load()
	for _, s := range snap.series {
		labels := append([]string{m.node}, s.labels...)
		for _, g := range gauges {
			if v, ok := s.reading[g.field]; ok {
				ch <- prometheus.MustNewConstMetric(m.descs[g.field], prometheus.GaugeValue, v, labels...)
			}
		}
		mask, ok := s.reading[fieldReasons]
		if !ok {
			continue
		}
		for _, r := range throttleReasons {
			v := 0.0
			if uint64(mask)&r.bit != 0 {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.reason, prometheus.GaugeValue, v, append(slices.Clip(labels), r.name)...)
		}
	}
}
