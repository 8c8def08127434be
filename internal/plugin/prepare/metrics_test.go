package prepare

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

func TestReason(t *testing.T) {
	_, decodeErr := v1alpha1.Decode([]byte(`{"kind":"x"}`))
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", ErrConflict), ReasonConflict},
		{fmt.Errorf("claim: %w", decodeErr), ReasonInvalidConfig},
		{fmt.Errorf("claim: %w: MPS limit above the share", sharing.ErrUnenforceable), ReasonInvalidConfig},
		{fmt.Errorf("x: %w", ErrUnknownDevice), ReasonUnknownDevice},
		{tag(errCheckpoint, errors.New("disk full")), ReasonCheckpoint},
		{fmt.Errorf("wrapped: %w", tag(errCDI, errors.New("bad spec"))), ReasonCDI},
		{errors.New("boom"), ReasonOther},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Reason(tc.err), tc.err.Error())
	}
	require.Equal(t, "disk full", tag(errCheckpoint, errors.New("disk full")).Error(), "tagging keeps the message")
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	reg := prometheus.NewPedanticRegistry()
	_, err := NewMetrics(reg, m)
	require.NoError(t, err)

	good := gpuClaim(uidA, "good", "gpu-0")
	res := m.PrepareClaims(ctx(t), []*resourceapi.ResourceClaim{good})
	require.NoError(t, res[good.UID].Err)
	res = m.PrepareClaims(ctx(t), []*resourceapi.ResourceClaim{gpuClaim(uidB, "conflict", "gpu-0")})
	require.ErrorIs(t, res[uidB].Err, ErrConflict)
	bad := claim("cccccccc-0000-0000-0000-000000000003", "badcfg", []alloc{{request: "gpu", device: "gpu-1"}},
		opaque(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"Nope"}}`))
	m.PrepareClaims(ctx(t), []*resourceapi.ResourceClaim{bad})

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpudra_plugin_errors_total Failed prepares and unprepares, by reason.
# TYPE gpudra_plugin_errors_total counter
gpudra_plugin_errors_total{operation="prepare",reason="conflict"} 1
gpudra_plugin_errors_total{operation="prepare",reason="invalid_config"} 1
# HELP gpudra_plugin_prepared_claims Claims prepared on this node.
# TYPE gpudra_plugin_prepared_claims gauge
gpudra_plugin_prepared_claims 1
# HELP gpudra_plugin_devices GPUs of this node by state (allocated: held by at least one prepared claim).
# TYPE gpudra_plugin_devices gauge
gpudra_plugin_devices{state="allocated"} 1
gpudra_plugin_devices{state="free"} 1
`), MetricErrors, MetricPreparedClaims, MetricDevices))
	require.Equal(t, 2, testutil.CollectAndCount(reg, MetricOperations), "success and error series for prepare")

	require.Empty(t, m.UnprepareClaims(ctx(t), []kubeletplugin.NamespacedObject{ref(good)})[good.UID])
	n, err := testutil.GatherAndCount(reg, MetricPrepareSeconds, MetricUnprepareSeconds, MetricCheckpointSeconds)
	require.NoError(t, err)
	require.Equal(t, 4, n, "prepare{success,error}, unprepare{success}, checkpoint{false}: no record is fsynced by default")
}

// TestRecordsSyncedOnlyWhenAsked: by default no checkpoint record of a
// prepare+unprepare is fsynced (a power loss voids the boot's records
// anyway); with SyncRecords the PrepareCompleted record is, once.
func TestRecordsSyncedOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		sync                bool
		wantSynced, wantAll uint64
	}{
		{sync: false, wantSynced: 0, wantAll: 2},
		{sync: true, wantSynced: 1, wantAll: 2},
	} {
		t.Run(fmt.Sprintf("SyncRecords=%v", tc.sync), func(t *testing.T) {
			e := newEnv(t, 1)
			e.syncRecords = tc.sync
			m, _ := e.manager()
			reg := prometheus.NewPedanticRegistry()
			_, err := NewMetrics(reg, m)
			require.NoError(t, err)
			c := gpuClaim(uidA, "a", "gpu-0")
			require.NoError(t, m.PrepareClaims(ctx(t), []*resourceapi.ResourceClaim{c})[c.UID].Err)
			require.NoError(t, m.UnprepareClaims(ctx(t), []kubeletplugin.NamespacedObject{ref(c)})[c.UID])
			count := func(durable string) uint64 {
				mfs, err := reg.Gather()
				require.NoError(t, err)
				for _, mf := range mfs {
					if mf.GetName() != MetricCheckpointSeconds {
						continue
					}
					for _, metric := range mf.GetMetric() {
						if label(metric, "durable") == durable {
							return metric.GetHistogram().GetSampleCount()
						}
					}
				}
				return 0
			}
			require.Equal(t, tc.wantSynced, count("true"), "fsynced record writes")
			require.Equal(t, tc.wantAll, count("true")+count("false"), "record writes of a prepare+unprepare")
		})
	}
}
