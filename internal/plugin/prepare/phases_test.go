package prepare

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Every phase a prepare or an unprepare runs through is observed once per
// claim, and no other.
func TestPhaseMetrics(t *testing.T) {
	prepared := []string{PhasePlan, PhaseLockClaim, PhaseLockDevices, PhaseCheckpointRead, PhaseConflicts, PhaseRecordStarted,
		PhaseHolders, PhaseMIG, PhaseSharing, PhaseCDI, PhaseRecordCompleted, PhaseUnlock}
	unprepared := []string{PhaseLockClaim, PhaseCheckpointRead, PhaseLockDevices, PhaseCDI, PhaseSharing, PhaseMIG, PhaseHolders, PhaseUnlock}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, m *Manager)
		want map[string][]string // operation -> phases observed once
	}{
		{"prepare and unprepare", func(t *testing.T, m *Manager) {
			c := gpuClaim(uidA, "a", "gpu-0")
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
		}, map[string][]string{"prepare": prepared, "unprepare": unprepared}},
		{"prepared again: ends after the read", func(t *testing.T, m *Manager) {
			c := gpuClaim(uidA, "a", "gpu-0")
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			m.metrics.phase.Reset()
			_, err = m.Prepare(ctx(t), c)
			require.NoError(t, err)
		}, map[string][]string{"prepare": {PhasePlan, PhaseLockClaim, PhaseLockDevices, PhaseCheckpointRead, PhaseUnlock}}},
		{"unprepare of an unknown claim", func(t *testing.T, m *Manager) {
			require.Empty(t, m.UnprepareClaims(ctx(t), []kubeletplugin.NamespacedObject{ref(gpuClaim(uidB, "b", "gpu-0"))})[uidB])
		}, map[string][]string{"unprepare": {PhaseLockClaim, PhaseCheckpointRead, PhaseCDI, PhaseUnlock}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newEnv(t, 1).manager()
			reg := prometheus.NewPedanticRegistry()
			_, err := NewMetrics(reg, m)
			require.NoError(t, err)
			tc.run(t, m)
			got := map[string][]string{}
			families, err := reg.Gather()
			require.NoError(t, err)
			for _, f := range families {
				if f.GetName() != MetricPhaseSeconds {
					continue
				}
				for _, s := range f.GetMetric() {
					require.EqualValues(t, 1, s.GetHistogram().GetSampleCount(), "%v", s.GetLabel())
					op, phase := label(s, "operation"), label(s, "phase")
					got[op] = append(got[op], phase)
				}
			}
			for op, phases := range tc.want {
				require.ElementsMatch(t, phases, got[op], op)
			}
			require.Len(t, got, len(tc.want))
		})
	}
}

func label(m *dto.Metric, name string) string {
	i := slices.IndexFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == name })
	if i < 0 {
		return ""
	}
	return m.GetLabel()[i].GetValue()
}

// Without metrics a phase timer records nothing and costs no clock reads.
func TestPhaseTimerWithoutMetrics(t *testing.T) {
	m, _ := newEnv(t, 1).manager()
	pt := m.phases("prepare")
	pt.done(PhasePlan)
	require.Nil(t, pt.h)
	require.True(t, pt.last.IsZero())
}
