package plugin

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/sim"
)

// A unified-memory GPU answers nvmlDeviceGetMemoryInfo NOT_SUPPORTED (the
// simulator's unifiedMemory): discovery publishes it without a memory
// capacity, and the health probe, which asks that call first, never
// calls it lost for that answer.
func TestUnifiedMemoryGPU(t *testing.T) {
	p, err := sim.Parse([]byte(`name: unified
driverVersion: "580.95.05"
cudaDriverVersion: "13.0"
models:
  - name: unified-gpu
    productName: NVIDIA Unified
    architecture: Blackwell
    computeCapability: "12.1"
    memory: 120Gi
    pciDeviceID: 0x2E1210DE
    nvml: {unifiedMemory: true}
gpus: [{model: unified-gpu}]
`))
	require.NoError(t, err)
	srv := sim.NewServer(p, "n")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	ctx := context.Background()

	node, err := discovery.Discover(ctx, srv, discovery.Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	require.Empty(t, node.Unavailable)
	require.Len(t, node.GPUs, 1)
	g := node.GPUs[0]
	require.Zero(t, g.MemoryBytes)
	devs, err := slice.Devices(node)
	require.NoError(t, err)
	require.Len(t, devs, 1)
	require.NotContains(t, devs[0].Capacity, slice.CapacityMemory)

	h, _ := srv.DeviceGetHandleByIndex(0)
	mon := health.New(health.Config{Lib: srv, GPUs: []health.GPU{{UUID: g.UUID, Name: g.DeviceName(), Device: h}}})
	for range 3 {
		mon.ProbeAll(ctx)
	}
	require.Equal(t, health.Healthy, mon.Snapshot().Health(g.UUID))
	require.Empty(t, mon.Snapshot().Conditions(g.UUID))
}
