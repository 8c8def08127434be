package health

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, documented in docs/health-and-telemetry.md.
const (
	MetricEvents        = "gpudra_plugin_health_events_total"
	MetricDevicesHealth = "gpudra_plugin_devices_by_health"
	MetricNVMLSeconds   = "gpudra_plugin_nvml_call_duration_seconds"
)

// nvmlBuckets start at 10µs: most NVML queries are a driver ioctl.
var nvmlBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1}

// Metrics of the health monitor. A nil *Metrics records nothing.
type Metrics struct {
	events *prometheus.CounterVec
	health *prometheus.GaugeVec
	nvml   *prometheus.HistogramVec
}

// NewMetrics registers the monitor's metrics in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricEvents,
			Help: "GPU health events by type (xid, ecc_double_bit), XID and what was done (tainted, ignored)."},
			[]string{"type", "xid", "action"}),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricDevicesHealth,
			Help: "Physical GPUs of this node by health (Healthy, Degraded, Unhealthy)."}, []string{"health"}),
		nvml: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricNVMLSeconds,
			Help: "Latency of the NVML calls of the health monitor, by call.", Buckets: nvmlBuckets}, []string{"call"}),
	}
	for _, c := range []prometheus.Collector{m.events, m.health, m.nvml} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) event(kind string, xid uint64, action string) {
	if m == nil {
		return
	}
	x := ""
	if kind == "xid" {
		x = strconv.FormatUint(xid, 10)
	}
	m.events.WithLabelValues(kind, x, action).Inc()
}

func (m *Metrics) nvmlCall(call string, d time.Duration) {
	if m == nil {
		return
	}
	m.nvml.WithLabelValues(call).Observe(d.Seconds())
}

// setHealthOf sets the health gauge from a snapshot over the given GPUs.
func (m *Metrics) setHealthOf(s Snapshot, gpus []GPU) {
	if m == nil {
		return
	}
	counts := map[Health]int{Healthy: 0, Degraded: 0, Unhealthy: 0}
	for _, g := range gpus {
		counts[s.Health(g.UUID)]++
	}
	for h, n := range counts {
		m.health.WithLabelValues(string(h)).Set(float64(n))
	}
}
