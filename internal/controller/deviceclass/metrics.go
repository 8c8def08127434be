package deviceclass

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, documented in docs/health-and-telemetry.md.
const (
	MetricReconciles       = "gpudra_controller_reconciles_total"
	MetricReconcileSeconds = "gpudra_controller_reconcile_duration_seconds"
	// MetricClassesCapped counts the per-model and per-profile classes not
	// created because of --max-derived-classes.
	MetricClassesCapped = "gpudra_controller_deviceclasses_capped"
)

// Metrics of the DeviceClass controller's reconciles. A nil *Metrics
// records nothing.
type Metrics struct {
	total    *prometheus.CounterVec
	duration prometheus.Histogram
	capped   prometheus.Gauge
}

// NewMetrics registers the reconcile metrics in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReconciles,
			Help: "DeviceClass reconciles by result (success, error)."}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricReconcileSeconds,
			Help:    "Time of one DeviceClass reconcile.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5}}),
		capped: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricClassesCapped,
			Help: "Per-model and per-profile DeviceClasses not created because the controller's limit (--max-derived-classes) is reached."}),
	}
	for _, c := range []prometheus.Collector{m.total, m.duration, m.capped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(start time.Time, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.total.WithLabelValues(result).Inc()
	m.duration.Observe(time.Since(start).Seconds())
}

func (m *Metrics) setCapped(n int) {
	if m == nil {
		return
	}
	m.capped.Set(float64(n))
}
