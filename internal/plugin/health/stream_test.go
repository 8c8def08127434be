package health

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Two kubelet streams at once both get the initial report, the change, and
// the periodic resend; a stream ends when its context does.
func TestStreamFanOut(t *testing.T) {
	f := newFixture(t, nil)
	id := f.gpus[0].UUID
	refs := func() []DeviceRef { return []DeviceRef{{Pool: "node-a", Device: "gpu-0", GPU: id}} }
	type stream struct {
		reports chan kubeletplugin.DeviceHealthReport
		cancel  context.CancelFunc
		done    chan error
	}
	start := func() stream {
		ctx, cancel := context.WithCancel(context.Background())
		s := stream{reports: make(chan kubeletplugin.DeviceHealthReport), cancel: cancel, done: make(chan error, 1)}
		go func() { s.done <- f.mon.Stream(ctx, s.reports, refs, 200*time.Millisecond) }()
		return s
	}
	next := func(s stream) kubeletplugin.DeviceHealth {
		t.Helper()
		select {
		case r := <-s.reports:
			require.Len(t, r.Devices, 1)
			return r.Devices[0]
		case <-time.After(10 * time.Second):
			t.Fatal("no report")
		}
		return kubeletplugin.DeviceHealth{}
	}
	a, b := start(), start()
	for _, s := range []stream{a, b} {
		assert.Equal(t, kubeletplugin.HealthStatusHealthy, next(s).Health, "initial report")
	}
	require.NoError(t, f.srv.SetLost(id, true))
	f.mon.ProbeAll(context.Background())
	for _, s := range []stream{a, b} {
		d := next(s)
		assert.Equal(t, kubeletplugin.HealthStatusUnhealthy, d.Health, "the change")
		assert.Contains(t, d.Message, "gpu-is-lost")
		assert.Equal(t, kubeletplugin.HealthStatusUnhealthy, next(s).Health, "resent without a change")
	}
	a.cancel()
	require.NoError(t, <-a.done)
	require.NoError(t, f.srv.SetLost(id, false))
	f.mon.ProbeAll(context.Background())
	for i := 0; next(b).Health != kubeletplugin.HealthStatusHealthy; i++ {
		require.Less(t, i, 5, "the other stream still gets the repair")
	}
	b.cancel()
	require.NoError(t, <-b.done)
}
