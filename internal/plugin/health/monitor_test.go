package health

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/test/sim"
)

// fixture is a monitor on a simulated 8-GPU node with a settable clock.
type fixture struct {
	srv  *sim.Server
	mon  *Monitor
	gpus []GPU
	now  time.Time
	reg  *prometheus.Registry
	// stateFile: see newPersistFixture.
	stateFile string
}

func newFixture(t *testing.T, ignored []uint64) *fixture {
	t.Helper()
	p, err := sim.Load("dgx-h100", nil)
	require.NoError(t, err)
	srv := sim.NewServer(p, "node-a")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	f := &fixture{srv: srv, now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), reg: prometheus.NewRegistry()}
	n, _ := srv.DeviceGetCount()
	for i := range n {
		d, _ := srv.DeviceGetHandleByIndex(i)
		id, _ := d.GetUUID()
		f.gpus = append(f.gpus, GPU{UUID: id, Name: "gpu-" + string(rune('0'+i)), Device: d})
	}
	f.mon = New(Config{Lib: srv, GPUs: f.gpus, IgnoredXIDs: ignored, DegradedHold: time.Minute, now: func() time.Time { return f.now }})
	m, err := NewMetrics(f.reg)
	require.NoError(t, err)
	f.mon.SetMetrics(m)
	return f
}

// deliver runs the event loop until the event set is drained once.
func (f *fixture) events(t *testing.T, inject func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	changes, stop := f.mon.Subscribe()
	defer stop()
	before := registrations(f.gpus)
	go func() { defer close(done); f.mon.watchEvents(ctx) }()
	require.Eventually(t, func() bool { return registrations(f.gpus) == before+len(f.gpus) }, 10*time.Second, time.Millisecond,
		"the event loop registers every GPU")
	inject()
	select {
	case <-changes:
	case <-time.After(300 * time.Millisecond): // ignored events change nothing
	}
	cancel()
	<-done
}

// registrations counts the RegisterEvents calls the simulated GPUs got
// (the go-nvml mocks record their calls).
func registrations(gpus []GPU) int {
	type recorder interface {
		RegisterEventsCalls() []struct {
			V        uint64
			EventSet nvml.EventSet
		}
	}
	n := 0
	for _, g := range gpus {
		n += len(g.Device.(recorder).RegisterEventsCalls())
	}
	return n
}

func TestMonitorFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(f *fixture)
		probe  bool
		health Health
		taints []resourceapi.DeviceTaint
	}{
		{name: "XID 79 event, then the probe sees the GPU lost",
			inject: func(f *fixture) { _ = f.srv.InjectXID(f.gpus[2].UUID, 79) }, probe: true, health: Unhealthy,
			taints: []resourceapi.DeviceTaint{{Key: KeyLost, Value: "gpu-is-lost", Effect: "NoExecute"},
				{Key: KeyXID, Value: "79", Effect: "NoExecute"}}},
		{name: "fatal XID 48 with a recovery action",
			inject: func(f *fixture) { _ = f.srv.InjectXID(f.gpus[2].UUID, 48) }, probe: true, health: Unhealthy,
			taints: []resourceapi.DeviceTaint{{Key: KeyECC, Value: "double-bit", Effect: "NoExecute"},
				{Key: KeyRecovery, Value: "gpu-reset", Effect: "NoExecute"}, {Key: KeyXID, Value: "48", Effect: "NoExecute"}}},
		{name: "degraded XID 74",
			inject: func(f *fixture) { _ = f.srv.InjectXID(f.gpus[2].UUID, 74) }, health: Degraded,
			taints: []resourceapi.DeviceTaint{{Key: KeyXID, Value: "74", Effect: "NoSchedule"}}},
		{name: "ignored XID 13",
			inject: func(f *fixture) { _ = f.srv.InjectXID(f.gpus[2].UUID, 13) }, probe: true, health: Healthy},
		{name: "double-bit ECC event (contained: no recovery action)",
			inject: func(f *fixture) { _ = f.srv.InjectDoubleBitECC(f.gpus[2].UUID) }, health: Unhealthy,
			taints: []resourceapi.DeviceTaint{{Key: KeyECC, Value: "double-bit", Effect: "NoExecute"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			ctx := context.Background()
			f.mon.ProbeAll(ctx) // baselines
			f.events(t, func() { tc.inject(f) })
			if tc.probe {
				f.mon.ProbeAll(ctx)
			}
			snap := f.mon.Snapshot()
			id := f.gpus[2].UUID
			assert.Equal(t, tc.health, snap.Health(id))
			got := snap.Taints(id)
			for i := range got {
				require.NotNil(t, got[i].TimeAdded)
				got[i].TimeAdded = nil
			}
			assert.Equal(t, tc.taints, got)
			for _, g := range f.gpus[3:] {
				assert.Equal(t, Healthy, snap.Health(g.UUID), "only the broken GPU")
			}
		})
	}
}

func TestMonitorRecovery(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	id := f.gpus[1].UUID
	f.mon.ProbeAll(ctx)
	f.events(t, func() { _ = f.srv.InjectXID(id, 79) })
	f.mon.ProbeAll(ctx)
	require.Equal(t, Unhealthy, f.mon.Snapshot().Health(id))
	assert.Equal(t, 1.0, testutil.ToFloat64(f.mon.cfg.Metrics.health.WithLabelValues("Unhealthy")))

	require.NoError(t, f.srv.Reset(id)) // the reboot the driver asked for
	f.mon.ProbeAll(ctx)
	assert.Equal(t, Healthy, f.mon.Snapshot().Health(id), "answers again, no recovery pending")
	assert.Empty(t, f.mon.Snapshot().Taints(id))
	assert.Equal(t, 8.0, testutil.ToFloat64(f.mon.cfg.Metrics.health.WithLabelValues("Healthy")))

	// A degraded XID without a recovery action expires after the hold.
	f.events(t, func() { _ = f.srv.InjectXID(id, 74) })
	f.now = f.now.Add(30 * time.Second)
	f.mon.ProbeAll(ctx)
	assert.Equal(t, Degraded, f.mon.Snapshot().Health(id))
	f.now = f.now.Add(31 * time.Second)
	f.mon.ProbeAll(ctx)
	assert.Equal(t, Healthy, f.mon.Snapshot().Health(id))

	// A fatal XID stays while the driver asks for a reset, however long.
	f.events(t, func() { _ = f.srv.InjectXID(id, 95) })
	f.mon.ProbeAll(ctx)
	f.now = f.now.Add(time.Hour)
	f.mon.ProbeAll(ctx)
	assert.Equal(t, Unhealthy, f.mon.Snapshot().Health(id))
	require.NoError(t, f.srv.Reset(id))
	f.mon.ProbeAll(ctx)
	assert.Equal(t, Healthy, f.mon.Snapshot().Health(id))
}

func TestMonitorProbeOnly(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	id := f.gpus[4].UUID
	f.mon.ProbeAll(ctx)
	require.NoError(t, f.srv.SetLost(id, true)) // no event at all
	f.mon.ProbeAll(ctx)
	assert.Equal(t, Unhealthy, f.mon.Snapshot().Health(id))
	assert.Equal(t, "NVML cannot reach the GPU (gpu-is-lost)", f.mon.Snapshot().Message(id))
	require.NoError(t, f.srv.SetLost(id, false))
	f.mon.ProbeAll(ctx)
	assert.Equal(t, Healthy, f.mon.Snapshot().Health(id))
}

func TestIgnoreListIsConfigurable(t *testing.T) {
	f := newFixture(t, []uint64{74})
	f.events(t, func() { _ = f.srv.InjectXID(f.gpus[0].UUID, 74) })
	assert.Empty(t, f.mon.Snapshot().Taints(f.gpus[0].UUID), "74 ignored by configuration")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.mon.cfg.Metrics.events.WithLabelValues("xid", "74", "ignored")))
	f.events(t, func() { _ = f.srv.InjectXID(f.gpus[0].UUID, 13) })
	assert.Equal(t, Degraded, f.mon.Snapshot().Health(f.gpus[0].UUID), "13 is no longer ignored")
}

func TestParseXIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint64
		err  bool
	}{
		{in: "13,31, 43,13", want: []uint64{13, 31, 43}},
		{in: "", want: nil},
		{in: "13,x", err: true},
	} {
		got, err := ParseXIDs(tc.in)
		if tc.err {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	assert.Equal(t, "13,31,43,45,68,109", FormatXIDs(DefaultIgnoredXIDs))
}

// A GPU that had no handle at start (lost before the plugin started)
// starts lost, keeps being probed, and is healthy once it answers again.
func TestMonitorGPUWithoutHandle(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	bus := func(i int) string { return f.srv.Profile().GPUs[i].PCIBusID }
	require.NoError(t, f.srv.SetLost(f.gpus[2].UUID, true))
	gpus := append([]GPU(nil), f.gpus...)
	gpus[2] = GPU{UUID: f.gpus[2].UUID, Name: "gpu-2", PCIBusID: bus(2), Unreachable: "gpu-is-lost"}
	gpus[4] = GPU{UUID: f.gpus[4].UUID, Name: "gpu-4"}                                    // no handle, no bus ID: found by UUID
	gpus[6] = GPU{UUID: "GPU-was-here", Name: "gpu-6", PCIBusID: bus(6), Unreachable: ""} // another GPU answers there
	mon := New(Config{Lib: f.srv, GPUs: gpus, now: func() time.Time { return f.now }})

	snap := mon.Snapshot()
	assert.Equal(t, []resourceapi.DeviceTaint{{Key: KeyLost, Value: "gpu-is-lost", Effect: "NoExecute", TimeAdded: ptrTime(f.now)}},
		snap.Taints(gpus[2].UUID), "lost before the first probe")
	assert.Equal(t, "NVML cannot reach the GPU (unreachable)", snap.Message(gpus[4].UUID))
	assert.Equal(t, Healthy, snap.Health(gpus[0].UUID))

	// The event loop skips the GPUs without a handle and serves the others.
	done := make(chan struct{})
	evCtx, cancel := context.WithCancel(ctx)
	go func() { defer close(done); mon.watchEvents(evCtx) }()
	require.Eventually(t, func() bool { // injected until the loop has registered and sees it
		require.NoError(t, f.srv.InjectXID(gpus[1].UUID, 95))
		return mon.Snapshot().Health(gpus[1].UUID) == Unhealthy
	}, 10*time.Second, 20*time.Millisecond)
	cancel()
	<-done

	mon.ProbeAll(ctx)
	snap = mon.Snapshot()
	assert.Equal(t, Unhealthy, snap.Health(gpus[2].UUID), "still lost")
	assert.Equal(t, Healthy, snap.Health(gpus[4].UUID), "answers: found by UUID")
	assert.Equal(t, Unhealthy, snap.Health(gpus[6].UUID))
	assert.Contains(t, snap.Message(gpus[6].UUID), "another GPU ("+f.gpus[6].UUID+") answers at PCI bus ID "+bus(6))

	require.NoError(t, f.srv.Reset(gpus[2].UUID))
	mon.ProbeAll(ctx)
	assert.Equal(t, Healthy, mon.Snapshot().Health(gpus[2].UUID), "answers again after the reset")
	assert.Empty(t, mon.Snapshot().Taints(gpus[2].UUID))
	require.NoError(t, f.srv.SetLost(gpus[2].UUID, true))
	mon.ProbeAll(ctx)
	assert.Equal(t, "NVML cannot reach the GPU (gpu-is-lost)", mon.Snapshot().Message(gpus[2].UUID), "the found handle is probed")
}

func ptrTime(t time.Time) *metav1.Time {
	v := metav1Time(t)
	return &v
}
