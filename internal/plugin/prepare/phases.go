package prepare

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricPhaseSeconds times the steps of one prepare or unprepare of a claim
// (the breakdown of MetricPrepareSeconds and MetricUnprepareSeconds).
const MetricPhaseSeconds = "gpudra_plugin_phase_duration_seconds"

// Phases of a prepare or unprepare, the phase label of MetricPhaseSeconds,
// in the order they run. A prepare of a claim that is already prepared ends
// after PhaseCheckpointRead; a failed one after the phase that failed.
const (
	// PhasePlan: the claim's allocation and configs checked and encoded.
	PhasePlan = "plan"
	// PhaseLockClaim: waiting for and taking the claim's file lock.
	PhaseLockClaim = "lock_claim"
	// PhaseLockDevices: the devices' file locks (unprepare: after the read).
	PhaseLockDevices = "lock_devices"
	// PhaseCheckpointRead: reading the claim's record.
	PhaseCheckpointRead = "checkpoint_read"
	// PhaseConflicts: the holder index of each device (exclusivity); also
	// clearing what an interrupted earlier attempt left.
	PhaseConflicts = "conflict_check"
	// PhaseRecordStarted: the PrepareStarted record (not fsynced).
	PhaseRecordStarted = "record_started"
	// PhaseHolders: adding (prepare) or removing (unprepare, with the
	// record) the claim's holders.
	PhaseHolders = "holders"
	// PhaseMIG: creating or destroying dynamic MIG devices.
	PhaseMIG = "mig"
	// PhaseSharing: time slices and MPS control daemons.
	PhaseSharing = "sharing"
	// PhaseCDI: writing or removing the claim's CDI spec.
	PhaseCDI = "cdi"
	// PhaseRecordCompleted: the PrepareCompleted record, fsynced.
	PhaseRecordCompleted = "record_completed"
	// PhaseUnlock: releasing the locks (and the claim's lock file once it
	// has no record).
	PhaseUnlock = "unlock"
)

// phaseBuckets start at 10µs: most phases are one or two system calls.
var phaseBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

func newPhaseHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPhaseSeconds,
		Help: "Time of each step of a claim's prepare or unprepare, by operation and phase.", Buckets: phaseBuckets},
		[]string{"operation", "phase"})
}

// phaseTimer observes the time since its previous mark as a phase of op.
// The zero value and a timer without metrics record nothing.
type phaseTimer struct {
	h    *prometheus.HistogramVec
	op   string
	last time.Time
}

func (m *Manager) phases(op string) *phaseTimer {
	if m.metrics == nil {
		return &phaseTimer{}
	}
	return &phaseTimer{h: m.metrics.phase, op: op, last: time.Now()}
}

// done ends phase: the time since the previous mark is observed as it.
func (t *phaseTimer) done(phase string) {
	if t.h == nil {
		return
	}
	now := time.Now()
	t.h.WithLabelValues(t.op, phase).Observe(now.Sub(t.last).Seconds())
	t.last = now
}
