package health

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/test/sim"
)

// Driver versions: R535 reports no recovery action, R570 does.
const (
	oldDriver = "535.183.01"
	newDriver = "570.124.06"
)

// newPersistFixture is a monitor on two simulated H100s with the given
// driver version, saving its state in a temporary directory as boot-1.
func newPersistFixture(t *testing.T, driver string) *fixture {
	t.Helper()
	p, err := sim.Parse([]byte("name: persist\ndriverVersion: \"" + driver + "\"\ncudaDriverVersion: \"12.2\"\n" +
		"gpus:\n  - model: h100-sxm5-80gb\n    count: 2\n"))
	require.NoError(t, err)
	srv := sim.NewServer(p, "node-a")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	f := &fixture{srv: srv, now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	for i := range 2 {
		d, _ := srv.DeviceGetHandleByIndex(i)
		id, _ := d.GetUUID()
		f.gpus = append(f.gpus, GPU{UUID: id, Name: "gpu-" + string(rune('0'+i)), Device: d})
	}
	f.stateFile = filepath.Join(t.TempDir(), "health-state.json")
	f.restart("boot-1")
	return f
}

// restart replaces the monitor by a new one on the same GPUs and state
// file, as a restarted plugin creates it; the old one stops saving.
func (f *fixture) restart(bootID string) {
	if f.mon != nil {
		f.mon.StopSaving()
	}
	f.mon = New(Config{Lib: f.srv, GPUs: f.gpus, DegradedHold: time.Minute, StateFile: f.stateFile, BootID: bootID,
		now: func() time.Time { return f.now }})
}

// xid makes the simulated driver report an XID on a GPU and hands the
// event to the monitor, as its event loop would (without the loop's timing).
func (f *fixture) xid(t *testing.T, gpu int, xid uint64) {
	t.Helper()
	require.NoError(t, f.srv.InjectXID(f.gpus[gpu].UUID, xid))
	f.mon.handleEvent(context.Background(), nvml.EventData{Device: f.gpus[gpu].Device, EventType: nvml.EventTypeXidCriticalError, EventData: xid})
}

func withoutTime(ts []resourceapi.DeviceTaint) []resourceapi.DeviceTaint {
	if len(ts) == 0 {
		return nil
	}
	out := make([]resourceapi.DeviceTaint, len(ts))
	for i, t := range ts {
		t.TimeAdded = nil
		out[i] = t
	}
	return out
}

func TestStateSurvivesRestart(t *testing.T) {
	xid := func(v string, e resourceapi.DeviceTaintEffect) resourceapi.DeviceTaint {
		return resourceapi.DeviceTaint{Key: KeyXID, Value: v, Effect: e}
	}
	for _, tc := range []struct {
		name   string
		driver string
		// before runs on the first monitor (saving); down between the two.
		before, down func(t *testing.T, f *fixture)
		bootID       string
		// restored: the taints of GPU 0 right after the restart, before any
		// probe; then each probe step advances the clock and checks.
		restored []resourceapi.DeviceTaint
		probes   []probeStep
	}{{
		name: "fatal XID, driver without recovery action", driver: oldDriver,
		before: func(t *testing.T, f *fixture) { f.xid(t, 0, 95) },
		bootID: "boot-1", restored: []resourceapi.DeviceTaint{xid("95", "NoExecute")},
		probes: []probeStep{{after: time.Hour, health: Unhealthy}},
	}, {
		name: "degraded XID keeps its hold deadline", driver: newDriver,
		before: func(t *testing.T, f *fixture) { f.xid(t, 0, 74) },
		down:   func(t *testing.T, f *fixture) { f.now = f.now.Add(40 * time.Second) },
		bootID: "boot-1", restored: []resourceapi.DeviceTaint{xid("74", "NoSchedule")},
		probes: []probeStep{{after: 10 * time.Second, health: Degraded}, {after: 11 * time.Second, health: Healthy}},
	}, {
		name: "another boot: everything discarded", driver: oldDriver,
		before: func(t *testing.T, f *fixture) { f.xid(t, 0, 95) },
		bootID: "boot-2", restored: nil,
		probes: []probeStep{{health: Healthy}},
	}, {
		name: "reset while the plugin was down: the pending recovery is remembered", driver: newDriver,
		before: func(t *testing.T, f *fixture) { f.xid(t, 0, 95) },
		down:   func(t *testing.T, f *fixture) { require.NoError(t, f.srv.Reset(f.gpus[0].UUID)) },
		bootID: "boot-1",
		restored: []resourceapi.DeviceTaint{{Key: KeyRecovery, Value: "gpu-reset", Effect: "NoExecute"},
			xid("95", "NoExecute")},
		probes: []probeStep{{health: Healthy}},
	}, {
		name: "lost GPU answers again after the restart", driver: newDriver,
		before: func(t *testing.T, f *fixture) {
			require.NoError(t, f.srv.SetLost(f.gpus[0].UUID, true))
			f.mon.ProbeAll(context.Background())
		},
		down:   func(t *testing.T, f *fixture) { require.NoError(t, f.srv.SetLost(f.gpus[0].UUID, false)) },
		bootID: "boot-1", restored: []resourceapi.DeviceTaint{{Key: KeyLost, Value: "gpu-is-lost", Effect: "NoExecute"}},
		probes: []probeStep{{health: Healthy}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newPersistFixture(t, tc.driver)
			f.mon.ProbeAll(ctx)
			f.mon.StartSaving(ctx)
			tc.before(t, f)
			before := f.mon.Snapshot().Taints(f.gpus[0].UUID)
			require.NotEmpty(t, before)
			if tc.down != nil {
				tc.down(t, f)
			}
			f.restart(tc.bootID)
			got := f.mon.Snapshot().Taints(f.gpus[0].UUID)
			assert.Equal(t, tc.restored, withoutTime(got))
			for _, r := range got {
				for _, b := range before {
					if r.Key == b.Key {
						assert.Equal(t, b.TimeAdded, r.TimeAdded, "%s keeps the time it was added", r.Key)
					}
				}
			}
			assert.Equal(t, Healthy, f.mon.Snapshot().Health(f.gpus[1].UUID))
			f.mon.StartSaving(ctx)
			for i, p := range tc.probes {
				f.now = f.now.Add(p.after)
				f.mon.ProbeAll(ctx)
				assert.Equal(t, p.health, f.mon.Snapshot().Health(f.gpus[0].UUID), "probe %d", i)
			}
			var saved struct {
				BootID string `json:"bootID"`
			}
			b, err := os.ReadFile(f.stateFile)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &saved))
			assert.Equal(t, tc.bootID, saved.BootID, "the file is rewritten for the current boot")
		})
	}
}

type probeStep struct {
	after  time.Duration
	health Health
}

// Only a monitor that saves writes the file; one that starts saving later
// (the plugin instance that takes over publishing) first adopts what the
// other one saved in the meantime.
func TestStartSavingAdoptsTheOtherWritersState(t *testing.T) {
	ctx := context.Background()
	f := newPersistFixture(t, oldDriver)
	first := f.mon
	first.ProbeAll(ctx)
	first.StartSaving(ctx)
	second := New(Config{Lib: f.srv, GPUs: f.gpus, StateFile: f.stateFile, BootID: "boot-1", now: func() time.Time { return f.now }})
	second.ProbeAll(ctx)
	saved, err := os.ReadFile(f.stateFile)
	require.NoError(t, err)

	f.xid(t, 1, 62) // seen by the first only
	require.Equal(t, Unhealthy, first.Snapshot().Health(f.gpus[1].UUID))
	require.Equal(t, Healthy, second.Snapshot().Health(f.gpus[1].UUID))
	now, err := os.ReadFile(f.stateFile)
	require.NoError(t, err)
	require.NotEqual(t, saved, now, "the saving monitor wrote the XID")
	second.ProbeAll(ctx)
	after, err := os.ReadFile(f.stateFile)
	require.NoError(t, err)
	require.Equal(t, now, after, "the other monitor does not write")

	first.StopSaving()
	second.StartSaving(ctx)
	assert.Equal(t, Unhealthy, second.Snapshot().Health(f.gpus[1].UUID))
	assert.Equal(t, []resourceapi.DeviceTaint{{Key: KeyXID, Value: "62", Effect: "NoExecute"}},
		withoutTime(second.Snapshot().Taints(f.gpus[1].UUID)))
}

// A damaged or foreign file is no reason to fail: the monitor starts empty.
func TestUnreadableStateIsDiscarded(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":      "{\"bootID\": \"boot-1\", \"gpus\": ",
		"newer version": `{"version": 99, "bootID": "boot-1", "gpus": {}}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newPersistFixture(t, oldDriver)
			require.NoError(t, os.WriteFile(f.stateFile, []byte(content), 0o600))
			f.restart("boot-1")
			assert.Empty(t, f.mon.Snapshot().GPUs)
		})
	}
}

// Volatile ECC counters start at zero when the driver loads: an
// uncorrectable error counted before the monitor's first probe (while the
// plugin was down) is a fault, and the counter falling back (a GPU reset)
// is the recovery, also on drivers that report no recovery action.
func TestVolatileECCAtStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		driver  string
		errors  int
		reset   bool // the GPU is reset after the first probe
		want    Health
		wantKey string
	}{
		{name: "no error", driver: oldDriver, want: Healthy},
		{name: "error while the plugin was down, old driver", driver: oldDriver, errors: 1, want: Unhealthy, wantKey: KeyECC},
		{name: "two errors, new driver", driver: newDriver, errors: 2, want: Unhealthy, wantKey: KeyECC},
		{name: "reset after start, old driver", driver: oldDriver, errors: 1, reset: true, want: Healthy},
		// A contained error asks for no recovery action, so no pending ->
		// none transition shows the reset: the counter falling back does.
		{name: "reset after start, new driver, no recovery action asked", driver: newDriver, errors: 1, reset: true, want: Healthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newPersistFixture(t, tc.driver)
			for range tc.errors {
				require.NoError(t, f.srv.InjectDoubleBitECC(f.gpus[1].UUID)) // no event set is registered yet
			}
			f.restart("boot-1")
			f.mon.ProbeAll(ctx)
			if tc.wantKey != "" {
				assert.Contains(t, withoutTime(f.mon.Snapshot().Taints(f.gpus[1].UUID)),
					resourceapi.DeviceTaint{Key: tc.wantKey, Value: "double-bit", Effect: "NoExecute"})
			}
			if tc.reset {
				require.NoError(t, f.srv.Reset(f.gpus[1].UUID))
				f.mon.ProbeAll(ctx)
			}
			assert.Equal(t, tc.want, f.mon.Snapshot().Health(f.gpus[1].UUID))
			assert.Equal(t, Healthy, f.mon.Snapshot().Health(f.gpus[0].UUID))
		})
	}
}

// A save interrupted by a crash leaves atomicfile's temp file next to the
// state file; the monitor that starts saving removes it (and only the
// state file's), and its saves leave no temp file behind.
func TestStartSavingRemovesLeftoverTempFiles(t *testing.T) {
	ctx := context.Background()
	f := newPersistFixture(t, oldDriver)
	dir := filepath.Dir(f.stateFile)
	leftover := filepath.Join(dir, "."+filepath.Base(f.stateFile)+".tmp-123")
	other := filepath.Join(dir, ".other.json.tmp-123")
	for _, p := range []string{leftover, other} {
		require.NoError(t, os.WriteFile(p, []byte("{"), 0o600))
	}
	f.mon.ProbeAll(ctx)
	f.mon.StartSaving(ctx)
	f.xid(t, 1, 62)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{filepath.Base(f.stateFile), filepath.Base(other)}, names)
	fi, err := os.Stat(f.stateFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}
