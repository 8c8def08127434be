package plugin

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
)

const testDriverName = "gpu.gpudra.io"

// statusEnv is one claim in a fake API server, a checkpoint and a status
// writer whose applies are counted.
type statusEnv struct {
	t       *testing.T
	client  *fake.Clientset
	store   *checkpoint.Store
	c       *claimStatus
	key     claimKey
	applies atomic.Int32
	fail    atomic.Bool // applies fail (after being counted)
}

func newStatusEnv(t *testing.T, delay time.Duration, existing ...resourceapi.AllocatedDeviceStatus) *statusEnv {
	store, err := checkpoint.Open(checkpoint.Options{Dir: t.TempDir(), BootID: func() (string, error) { return "boot-1", nil }})
	require.NoError(t, err)
	e := &statusEnv{t: t, store: store, key: claimKey{Namespace: "ns", Name: "c1", UID: "uid-1"}}
	e.client = fake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"},
		Status: resourceapi.ResourceClaimStatus{Devices: existing}})
	e.client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			e.applies.Add(1)
			if e.fail.Load() {
				return true, nil, errors.New("API server unavailable")
			}
		}
		return false, nil, nil
	})
	e.c = e.writer(delay)
	return e
}

// writer is a status writer of the node's plugin over e's claim and checkpoint.
func (e *statusEnv) writer(delay time.Duration) *claimStatus {
	c := &claimStatus{client: e.client, driver: testDriverName, manager: testDriverName + "/node-a", state: prepare.NewPrepared(e.store),
		devices: func() map[string]resourceapi.Device { return nil },
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[claimKey]()),
		delay:   delay, metrics: newPluginMetrics(), written: map[types.UID]bool{}}
	e.t.Cleanup(c.queue.ShutDown)
	return c
}

// claim is the claim as the API server has it now (what the helper reads).
func (e *statusEnv) claim() *resourceapi.ResourceClaim {
	c, err := e.client.ResourceV1().ResourceClaims("ns").Get(context.Background(), "c1", metav1.GetOptions{})
	require.NoError(e.t, err)
	return c
}

func (e *statusEnv) ours() int {
	n := 0
	for _, d := range e.claim().Status.Devices {
		if d.Driver == testDriverName {
			n++
		}
	}
	return n
}

func (e *statusEnv) prepare() {
	require.NoError(e.t, e.store.Put(&checkpoint.ClaimRecord{UID: "uid-1", Namespace: "ns", Name: "c1", State: checkpoint.PrepareCompleted,
		Devices: []checkpoint.Device{{Pool: "node-a", Name: "gpu-1", UUID: "GPU-1", Requests: []string{"gpu"}}}}))
}

func (e *statusEnv) unprepare() { require.NoError(e.t, e.store.Delete("uid-1")) }

// A claim's status is written when it changes something: a removal is
// skipped only when the API server is known to hold no entry of ours.
func TestClaimStatusSkipsOnlyWritesThatChangeNothing(t *testing.T) {
	other := resourceapi.AllocatedDeviceStatus{Driver: "other.example.com", Pool: "p", Device: "d"}
	for _, tc := range []struct {
		name     string
		existing []resourceapi.AllocatedDeviceStatus
		// steps run in order; "seen" is the helper's read at a prepare.
		steps       func(e *statusEnv)
		wantApplies int32
		wantOurs    int
	}{
		{"prepared and unprepared before the write: nothing to write", nil, func(e *statusEnv) {
			e.prepare()
			e.c.prepared(e.claim())
			e.unprepare()
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 0, 0},
		{"only another driver's entries on the claim: nothing of ours to remove", []resourceapi.AllocatedDeviceStatus{other}, func(e *statusEnv) {
			e.prepare()
			e.c.prepared(e.claim())
			e.unprepare()
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 0, 0},
		{"entries of ours already on the claim (an earlier process): removed", nil, func(e *statusEnv) {
			// The plugin before a restart wrote them, with the same field manager.
			e.prepare()
			require.NoError(t, e.writer(0).sync(t.Context(), e.key))
			require.Equal(t, 1, e.ours())
			e.applies.Store(0)

			e.c.prepared(e.claim())
			e.unprepare()
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 1, 0},
		{"unprepared without a prepare seen here (a rolling update's other plugin): removal written", nil, func(e *statusEnv) {
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 1, 0},
		{"prepared: entries written, then removed", nil, func(e *statusEnv) {
			e.prepare()
			e.c.prepared(e.claim())
			require.NoError(t, e.c.sync(t.Context(), e.key))
			require.Equal(t, 1, e.ours())
			e.unprepare()
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 2, 0},
		{"prepared again after a removal: entries written again", nil, func(e *statusEnv) {
			e.prepare()
			e.c.prepared(e.claim())
			require.NoError(t, e.c.sync(t.Context(), e.key))
			e.unprepare()
			require.NoError(t, e.c.sync(t.Context(), e.key))
			e.prepare()
			e.c.prepared(e.claim())
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 3, 1},
		{"a failed write of entries may have landed: the removal is written", nil, func(e *statusEnv) {
			e.prepare()
			e.c.prepared(e.claim())
			e.fail.Store(true)
			require.Error(t, e.c.sync(t.Context(), e.key))
			e.fail.Store(false)
			e.unprepare()
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 2, 0},
		{"a read that missed our own write in flight does not make the claim clean", nil, func(e *statusEnv) {
			e.prepare()
			stale := e.claim() // read before the entries land
			e.c.prepared(stale)
			require.NoError(t, e.c.sync(t.Context(), e.key))
			e.c.prepared(stale) // e.g. a repeated prepare's read, overtaken
			e.unprepare()
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 2, 0},
		{"entries are always written, even over a clean claim", nil, func(e *statusEnv) {
			e.prepare()
			e.c.prepared(e.claim())
			require.NoError(t, e.c.sync(t.Context(), e.key))
			require.NoError(t, e.c.sync(t.Context(), e.key))
		}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStatusEnv(t, 0, tc.existing...)
			tc.steps(e)
			require.Equal(t, tc.wantApplies, e.applies.Load(), "status applies")
			require.Equal(t, tc.wantOurs, e.ours(), "entries of ours on the claim")
			require.LessOrEqual(t, len(e.c.written), 1)
		})
	}
}

// Prepares and unprepares of one claim within the delay are reconciled
// once, against the claim's final state.
func TestClaimStatusCoalesces(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cycles of prepare+unprepare, then whether it ends prepared.
		cycles      int
		endPrepared bool
		wantApplies int32
		wantOurs    int
	}{
		{"many cycles, ends unprepared: no write", 20, false, 0, 0},
		{"many cycles, ends prepared: one write", 20, true, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStatusEnv(t, 200*time.Millisecond)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { e.c.run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			for range tc.cycles {
				e.prepare()
				e.c.prepared(e.claim())
				e.unprepare()
				e.c.unprepared(e.key)
			}
			if tc.endPrepared {
				e.prepare()
				e.c.prepared(e.claim())
			}
			require.Eventually(t, func() bool {
				return e.c.queue.Len() == 0 && testutilCount(e.c.metrics) > 0
			}, 5*time.Second, 10*time.Millisecond)
			time.Sleep(300 * time.Millisecond) // nothing else comes
			require.Equal(t, tc.wantApplies, e.applies.Load(), "status applies")
			require.Equal(t, tc.wantOurs, e.ours(), "entries of ours on the claim")
		})
	}
}

// testutilCount is how many reconciliations pm counted.
func testutilCount(pm *pluginMetrics) float64 {
	n := 0.0
	for _, r := range []string{statusApplied, statusUnchanged, statusGone, statusFailed} {
		n += testutil.ToFloat64(pm.statusWrites.WithLabelValues(r))
	}
	return n
}
