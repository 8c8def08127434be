package prepare

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// Metric names, documented in docs/health-and-telemetry.md.
const (
	MetricPrepareSeconds    = "gpudra_plugin_prepare_duration_seconds"
	MetricUnprepareSeconds  = "gpudra_plugin_unprepare_duration_seconds"
	MetricOperations        = "gpudra_plugin_operations_total"
	MetricErrors            = "gpudra_plugin_errors_total"
	MetricPreparedClaims    = "gpudra_plugin_prepared_claims"
	MetricDevices           = "gpudra_plugin_devices"
	MetricCheckpointSeconds = "gpudra_plugin_checkpoint_write_duration_seconds"
	// MetricRecoverFailedClaims counts the claims that the start-up recovery
	// could not settle and that are still recorded (until unprepared).
	MetricRecoverFailedClaims = "gpudra_plugin_recover_failed_claims"
	// MetricTimeSliceRestoresPending counts GPUs that no claim holds and
	// whose default time slice could not be restored yet.
	MetricTimeSliceRestoresPending = "gpudra_plugin_timeslice_restores_pending"
	// MetricMPSDaemonsRestarted counts MPS control daemons of prepared
	// claims found not answering, by result: "replaced" (started again; the
	// claim's CUDA clients of the old one must restart) or "failed".
	MetricMPSDaemonsRestarted = "gpudra_plugin_mps_daemons_restarted_total"
)

// Error reasons of the errors metric.
const (
	ReasonConflict      = "conflict"
	ReasonInvalidConfig = "invalid_config"
	ReasonUnknownDevice = "unknown_device"
	ReasonCheckpoint    = "checkpoint"
	ReasonCDI           = "cdi"
	ReasonOther         = "other"
)

// Sentinels that classify failures for the errors metric.
var (
	ErrUnknownDevice = errors.New("device not on this node")
	errCheckpoint    = errors.New("checkpoint")
	errCDI           = errors.New("CDI")
)

// latencyBuckets start at 100µs: a prepare is about one fsync'd write.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Metrics of the prepare state machine. A nil *Metrics records nothing.
type Metrics struct {
	prepare, unprepare *prometheus.HistogramVec
	ops                *prometheus.CounterVec
	errors             *prometheus.CounterVec
	checkpoint         *prometheus.HistogramVec
	phase              *prometheus.HistogramVec
}

// NewMetrics registers the metrics of m in reg. Call before serving.
func NewMetrics(reg prometheus.Registerer, m *Manager) (*Metrics, error) {
	x := &Metrics{
		prepare: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPrepareSeconds,
			Help: "Time to prepare one claim, by result.", Buckets: latencyBuckets}, []string{"result"}),
		unprepare: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricUnprepareSeconds,
			Help: "Time to unprepare one claim, by result.", Buckets: latencyBuckets}, []string{"result"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricOperations,
			Help: "Prepare and unprepare operations per claim, by result."}, []string{"operation", "result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricErrors,
			Help: "Failed prepares and unprepares, by reason."}, []string{"operation", "reason"}),
		checkpoint: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricCheckpointSeconds,
			Help: "Time to write a checkpoint record, by durability (fsync or not).", Buckets: latencyBuckets}, []string{"durable"}),
		phase: newPhaseHistogram(),
	}
	collectors := []prometheus.Collector{x.prepare, x.unprepare, x.ops, x.errors, x.checkpoint, x.phase, newHeldCollector(m),
		newRecoveryCollector(m), newMPSCollector(m)}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.metrics = x
	return x, nil
}

func (x *Metrics) observe(op string, start time.Time, err error) {
	if x == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
		x.errors.WithLabelValues(op, Reason(err)).Inc()
	}
	h := x.prepare
	if op == "unprepare" {
		h = x.unprepare
	}
	h.WithLabelValues(result).Observe(time.Since(start).Seconds())
	x.ops.WithLabelValues(op, result).Inc()
}

func (x *Metrics) checkpointWrite(start time.Time, durable bool) {
	if x == nil {
		return
	}
	d := "false"
	if durable {
		d = "true"
	}
	x.checkpoint.WithLabelValues(d).Observe(time.Since(start).Seconds())
}

// Reason classifies a prepare or unprepare error for the errors metric.
func Reason(err error) string {
	var decodeErr *v1alpha1.DecodeError
	switch {
	case errors.Is(err, ErrConflict):
		return ReasonConflict
	case errors.As(err, &decodeErr), errors.Is(err, sharing.ErrUnenforceable):
		return ReasonInvalidConfig
	case errors.Is(err, ErrUnknownDevice):
		return ReasonUnknownDevice
	case errors.Is(err, errCheckpoint):
		return ReasonCheckpoint
	case errors.Is(err, errCDI):
		return ReasonCDI
	default:
		return ReasonOther
	}
}

// heldCollector reports the prepared claims and the devices by state from
// one read of the on-disk holder index per scrape.
type heldCollector struct {
	m              *Manager
	claims, states *prometheus.Desc
}

func newHeldCollector(m *Manager) *heldCollector {
	return &heldCollector{m: m,
		claims: prometheus.NewDesc(MetricPreparedClaims, "Claims prepared on this node.", nil, nil),
		states: prometheus.NewDesc(MetricDevices,
			"GPUs of this node by state (allocated: held by at least one prepared claim).", []string{"state"}, nil)}
}

func (c *heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.claims; ch <- c.states }

func (c *heldCollector) Collect(ch chan<- prometheus.Metric) {
	held, err := c.m.cfg.Checkpoints.HeldDevices()
	if err != nil {
		held = nil // reported as nothing held; the error surfaces in prepare
	}
	claims := map[string]bool{}
	for _, uids := range held {
		for _, u := range uids {
			claims[u] = true
		}
	}
	ch <- prometheus.MustNewConstMetric(c.claims, prometheus.GaugeValue, float64(len(claims)))
	ch <- prometheus.MustNewConstMetric(c.states, prometheus.GaugeValue, float64(len(held)), "allocated")
	ch <- prometheus.MustNewConstMetric(c.states, prometheus.GaugeValue, float64(len(c.m.gpus)-len(held)), "free")
}

// recoveryCollector reports, per scrape, what recovery left to do: claims
// whose recovery failed (read again, so an unprepare clears them) and GPUs
// with a time-slice restore pending.
type recoveryCollector struct {
	m                *Manager
	failed, restores *prometheus.Desc
}

func newRecoveryCollector(m *Manager) *recoveryCollector {
	return &recoveryCollector{m: m,
		failed: prometheus.NewDesc(MetricRecoverFailedClaims,
			"Claims the plugin could not recover at start and that are still prepared (see its log and the claims' events).", nil, nil),
		restores: prometheus.NewDesc(MetricTimeSliceRestoresPending,
			"GPUs no claim holds whose default time slice could not be restored yet; retried with their next claim and at start.", nil, nil)}
}

func (c *recoveryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.failed; ch <- c.restores }

func (c *recoveryCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.recoverMu.Lock()
	failed := c.m.recoverFailed
	c.m.recoverMu.Unlock()
	claims := map[string]bool{}
	for _, f := range failed {
		if rec, err := c.m.cfg.Checkpoints.Get(f.ClaimUID); f.Claim != "" && err == nil && rec != nil {
			claims[f.ClaimUID] = true
		}
	}
	restores := 0
	for _, d := range c.m.timeSliceMarkers(context.Background()) {
		if !c.m.held(d) {
			restores++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, float64(len(claims)))
	ch <- prometheus.MustNewConstMetric(c.restores, prometheus.GaugeValue, float64(restores))
}

// mpsCollector reports the manager's counts of MPS daemons started again
// (they count from the plugin's start, recovery included).
type mpsCollector struct {
	m    *Manager
	desc *prometheus.Desc
}

func newMPSCollector(m *Manager) *mpsCollector {
	return &mpsCollector{m: m, desc: prometheus.NewDesc(MetricMPSDaemonsRestarted,
		"MPS control daemons of prepared claims that stopped answering, by result: replaced (started again; "+
			"CUDA processes connected to the old daemon must be restarted) or failed.", []string{"result"}, nil)}
}

func (c *mpsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *mpsCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.m.mpsReplaced.Load()), "replaced")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.m.mpsFailed.Load()), "failed")
}

// tagged marks err with a kind sentinel for Reason without changing its
// message.
type tagged struct{ kind, err error }

func (t tagged) Error() string   { return t.err.Error() }
func (t tagged) Unwrap() []error { return []error{t.kind, t.err} }

func tag(kind, err error) error {
	if err == nil {
		return nil
	}
	return tagged{kind: kind, err: err}
}
