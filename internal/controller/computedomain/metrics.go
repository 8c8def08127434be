package computedomain

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Metric names, documented in docs/health-and-telemetry.md and docs/computedomains.md.
const (
	// MetricSyncs counts domain syncs by queue (objects, status) and result.
	MetricSyncs = "gpudra_computedomain_syncs_total"
	// MetricSyncSeconds is the time of one sync.
	MetricSyncSeconds = "gpudra_computedomain_sync_duration_seconds"
	// MetricWrites counts the controller's API writes by object (finalizer,
	// template, daemonset, status, delete, update: a DaemonSet brought to
	// the controller's current spec, nudge: MetricNudges) and result:
	// success, conflict (HTTP 409), throttled (HTTP 429) or error.
	MetricWrites = "gpudra_computedomain_writes_total"
	// MetricStatusUnchanged counts status syncs that wrote nothing because
	// the status already was what the controller computed.
	MetricStatusUnchanged = "gpudra_computedomain_status_unchanged_total"
	// MetricServed is the number of ComputeDomain group versions the API
	// server serves (0: no CRD installed, the controller waits).
	MetricServed = "gpudra_computedomain_crds_served"
	// MetricNudges counts the nudges (NudgeAnnotation) written on IMEX
	// daemon pods whose sandbox the kubelet had not created, by attempt
	// (1 ... MaxNudges). The patches are also counted in MetricWrites as
	// object "nudge".
	MetricNudges = "gpudra_computedomain_daemon_pod_nudges_total"
)

// Write results of MetricWrites.
const (
	resultSuccess   = "success"
	resultConflict  = "conflict"
	resultThrottled = "throttled"
	resultError     = "error"
)

// Metrics of the ComputeDomain controller. A nil *Metrics records nothing.
type Metrics struct {
	syncs     *prometheus.CounterVec
	duration  prometheus.Histogram
	writes    *prometheus.CounterVec
	unchanged prometheus.Counter
	served    prometheus.Gauge
	nudges    *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSyncs,
			Help: "ComputeDomain syncs by queue (objects, status) and result (success, error)."}, []string{"queue", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricSyncSeconds,
			Help: "Time of one ComputeDomain sync.", Buckets: []float64{0.0001, 0.001, 0.01, 0.1, 0.5, 1, 5}}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricWrites,
			Help: "API writes of the ComputeDomain controller by object and result (success, conflict: HTTP 409, throttled: HTTP 429, error)."},
			[]string{"object", "result"}),
		unchanged: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricStatusUnchanged,
			Help: "ComputeDomain status syncs that wrote nothing: the status was already up to date."}),
		served: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricServed,
			Help: "ComputeDomain group versions the API server serves; 0 while no ComputeDomain CRD is installed."}),
		nudges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricNudges,
			Help: "Nudges of the kubelet (an annotation change) for IMEX daemon pods whose sandbox it had not created, by attempt."},
			[]string{"attempt"}),
	}
	for _, c := range []prometheus.Collector{m.syncs, m.duration, m.writes, m.unchanged, m.served, m.nudges} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observeSync(queue string, start time.Time, err error) {
	if m == nil {
		return
	}
	result := resultSuccess
	if err != nil {
		result = resultError
	}
	m.syncs.WithLabelValues(queue, result).Inc()
	m.duration.Observe(time.Since(start).Seconds())
}

// observeWrite records one API write of object and returns err unchanged.
func (m *Metrics) observeWrite(object string, err error) error {
	if m != nil {
		m.writes.WithLabelValues(object, writeResult(err)).Inc()
	}
	return err
}

func writeResult(err error) string {
	switch {
	case err == nil:
		return resultSuccess
	case apierrors.IsConflict(err):
		return resultConflict
	case apierrors.IsTooManyRequests(err):
		return resultThrottled
	default:
		return resultError
	}
}

func (m *Metrics) statusUnchanged() {
	if m != nil {
		m.unchanged.Inc()
	}
}

func (m *Metrics) setServed(n int) {
	if m != nil {
		m.served.Set(float64(n))
	}
}

func (m *Metrics) nudged(attempt int) {
	if m != nil {
		m.nudges.WithLabelValues(strconv.Itoa(attempt)).Inc()
	}
}
