package health

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A GPU handed to a virtual machine does not answer NVML; the probe leaves
// it alone until it is back, then probes it as before.
func TestProbeSkipsPassedThroughGPUs(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	gone := f.gpus[1].UUID
	passed := map[string]bool{gone: true}
	mon := New(Config{Lib: f.srv, GPUs: f.gpus, now: func() time.Time { return f.now },
		PassedThrough: func(uuid string) bool { return passed[uuid] }})
	require.NoError(t, f.srv.SetLost(gone, true)) // what a GPU on vfio-pci looks like to NVML
	mon.ProbeAll(ctx)
	require.Equal(t, Healthy, mon.Snapshot().Health(gone), "not probed while passed through")
	require.Empty(t, mon.Snapshot().Taints(gone))

	passed[gone] = false // back on nvidia, but broken
	mon.ProbeAll(ctx)
	require.Equal(t, Unhealthy, mon.Snapshot().Health(gone), "probed again once back")
}
