package libtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/test/nvmlsim"
)

// TestHealthMonitor runs internal/plugin/health's monitor on the library: XID 79 in
// the fault file makes the GPU unhealthy (the event set delivers the XID,
// the probe sees the GPU lost); emptying the file resets the GPU and the
// monitor sees it recover.
func TestHealthMonitor(t *testing.T) {
	root := newRoot(t, "dgx-h100")
	trace := filepath.Join(t.TempDir(), "trace")
	t.Setenv(nvmlsim.TraceEnv, trace)
	lib := open(t, root)
	var gpus []health.GPU
	for i := range 3 {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		ok(t, ret)
		uuid, ret := dev.GetUUID()
		ok(t, ret)
		gpus = append(gpus, health.GPU{UUID: uuid, Name: fmt.Sprintf("gpu-%d", i), Device: dev})
	}
	mon := health.New(health.Config{Lib: lib, GPUs: gpus, ProbeInterval: 50 * time.Millisecond})
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		mon.Run(c)
	}()
	defer func() {
		cancel()
		<-done
	}()

	// An event before the monitor registered its event set would be lost.
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(trace)
		return strings.Count(string(data), "nvml nvmlDeviceRegisterEvents\n") == len(gpus)
	}, 10*time.Second, 10*time.Millisecond)
	appendFault(t, root, "gpu-2 xid 79")
	// The event and the probe both report it, in either order.
	require.Eventually(t, func() bool {
		var keys []string
		for _, cond := range mon.Snapshot().Conditions(gpus[2].UUID) {
			keys = append(keys, cond.Key+"="+cond.Value)
		}
		return slices.Contains(keys, health.KeyXID+"=79") && slices.Contains(keys, health.KeyLost+"=gpu-is-lost")
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, health.Unhealthy, mon.Snapshot().Health(gpus[2].UUID))
	require.Equal(t, health.Healthy, mon.Snapshot().Health(gpus[1].UUID))

	require.NoError(t, os.WriteFile(filepath.Join(root, faultFile), nil, 0o644))
	require.Eventually(t, func() bool { return mon.Snapshot().Health(gpus[2].UUID) == health.Healthy },
		10*time.Second, 20*time.Millisecond, "a reset GPU recovers: %v", mon.Snapshot().Conditions(gpus[2].UUID))
}
