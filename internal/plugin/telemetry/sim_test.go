package telemetry

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/test/sim"
)

// TestSamplerOnSimulator samples the in-process simulator of a node with
// a whole H100 and one in MIG mode, discovered like the plugin does, with
// its claims in a real checkpoint: the held GPU and MIG device carry their
// claim's labels and load; the GPU in MIG mode has no utilization, its MIG
// device gets one from GPM from the second sample on.
func TestSamplerOnSimulator(t *testing.T) {
	ctx := testCtx(t)
	p, err := sim.Parse([]byte(`name: telemetry
driverVersion: "570.124.06"
cudaDriverVersion: "12.8"
gpus:
  - {model: h100-sxm5-80gb}
  - {model: h100-sxm5-80gb, migEnabled: true, migDevices: [3g.40gb, 3g.40gb]}
`))
	require.NoError(t, err)
	srv := sim.NewServer(p, "node-a")
	procs := t.TempDir()
	srv.SetProcessDir(procs)
	require.Equal(t, nvml.SUCCESS, srv.Init())
	node, err := discovery.Discover(ctx, srv, discovery.Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	devices := DevicesOf(node)
	require.Len(t, devices, 4, "two GPUs and two MIG devices: %+v", devices)
	whole, mig := devices[0], devices[2]
	require.Equal(t, "3g.40gb", mig.MIGProfile)

	store, err := checkpoint.Open(checkpoint.Options{Dir: t.TempDir(), BootID: func() (string, error) { return "boot-1", nil }})
	require.NoError(t, err)
	hold(t, store, "u1", "demo", "train", checkpoint.Device{Name: whole.Name, UUID: whole.UUID})
	hold(t, store, "u2", "demo", "infer", checkpoint.Device{Name: mig.Name, UUID: mig.UUID,
		MIG: &checkpoint.MIG{Profile: mig.MIGProfile}})
	for id, uuid := range map[string]string{"c1": whole.UUID, "c2": mig.UUID} {
		require.NoError(t, sim.WriteProcess(procs, id, sim.Process{Devices: []string{uuid}}))
	}
	time.Sleep(600 * time.Millisecond) // the simulator rereads its processes every 500 ms
	pods := &ClaimPods{}
	s := New(Config{Node: "node-a", Lib: srv, Devices: devices, Held: (&CheckpointHolders{Store: store}).Held, Pods: pods})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, s.Register(reg))

	util := func() map[string]float64 {
		out := map[string]float64{}
		for _, m := range gather(t, reg, MetricUtilization) {
			l := labelMap(m)
			out[l["device"]+"/"+l["claim_name"]] = m.GetGauge().GetValue()
		}
		return out
	}
	s.SampleOnce(ctx)
	first := util()
	assert.Greater(t, first[whole.Name+"/train"], 0.3, "busy and labelled: %v", first)
	assert.Equal(t, 0.0, first[devices[1].Name+"/"]+first[devices[3].Name+"/"])
	assert.NotContains(t, first, mig.Name+"/infer", "GPM needs two samples")
	time.Sleep(20 * time.Millisecond)
	s.SampleOnce(ctx)
	second := util()
	assert.Greater(t, second[mig.Name+"/infer"], 0.3, "per-MIG utilization from GPM: %v", second)
	assert.Equal(t, 0.0, second[devices[3].Name+"/"], "the idle MIG device")
	assert.NotContains(t, second, devices[1].Name+"/", "no utilization of a GPU in MIG mode")

	used := map[string]float64{}
	for _, m := range gather(t, reg, MetricMemoryUsed) {
		used[labelMap(m)["device"]] = m.GetGauge().GetValue()
	}
	assert.Greater(t, used[mig.Name], 0.0)
	assert.Equal(t, used[mig.Name], used[devices[1].Name], "the GPU's memory use is its MIG devices'")
	assert.Empty(t, powerOf(t, reg, mig.Name), "no power reading per MIG device")
	assert.NotEmpty(t, powerOf(t, reg, devices[1].Name))

	// Released: the labels clear; the MIG device's GPM samples are kept
	// while it exists.
	require.NoError(t, store.RemoveHolder(mig.Name, "u2"))
	s.SampleOnce(ctx)
	assert.Contains(t, util(), mig.Name+"/")
	s.reader.close()
	assert.Empty(t, s.reader.migGPM, "samples freed")
}

func powerOf(t *testing.T, reg prometheus.Gatherer, device string) []float64 {
	var out []float64
	for _, m := range gather(t, reg, MetricPower) {
		if labelMap(m)["device"] == device {
			out = append(out, m.GetGauge().GetValue())
		}
	}
	return out
}

// hold records a completely prepared claim and its holder entries.
func hold(t *testing.T, store *checkpoint.Store, uid, ns, name string, devices ...checkpoint.Device) {
	t.Helper()
	rec := &checkpoint.ClaimRecord{UID: uid, Namespace: ns, Name: name, State: checkpoint.PrepareCompleted, Devices: devices}
	require.NoError(t, store.Put(rec))
	for _, d := range devices {
		require.NoError(t, store.AddHolder(d.Name, checkpoint.Holder{ClaimUID: uid, Claim: ns + "/" + name, Access: "exclusive"}))
	}
}

func TestCheckpointHolders(t *testing.T) {
	store, err := checkpoint.Open(checkpoint.Options{Dir: t.TempDir(), BootID: func() (string, error) { return "boot-1", nil }})
	require.NoError(t, err)
	hold(t, store, "u1", "ns", "whole", checkpoint.Device{Name: "gpu-0", UUID: "GPU-a"})
	hold(t, store, "u2", "ns", "dyn", checkpoint.Device{Name: "gpu-1-mig-1g10gb-3", UUID: "MIG-b",
		MIG: &checkpoint.MIG{Profile: "1g.10gb", Dynamic: true}})
	hold(t, store, "u3", "mon", "agent", checkpoint.Device{Name: "gpu-0", UUID: "GPU-a", AdminAccess: true})
	// In the middle of a prepare: not yet labelled.
	require.NoError(t, store.Put(&checkpoint.ClaimRecord{UID: "u4", Namespace: "ns", Name: "half", State: checkpoint.PrepareStarted,
		Devices: []checkpoint.Device{{Name: "gpu-2", UUID: "GPU-c"}}}))
	require.NoError(t, store.AddHolder("gpu-2", checkpoint.Holder{ClaimUID: "u4", Claim: "ns/half"}))

	h := &CheckpointHolders{Store: store}
	got, err := h.Held(context.Background())
	require.NoError(t, err)
	assert.ElementsMatch(t, []Holding{
		{Device: Device{Name: "gpu-0", UUID: "GPU-a"}, Claim: ClaimRef{Namespace: "ns", Name: "whole", UID: "u1"}},
		{Device: Device{Name: "gpu-1-mig-1g10gb-3", UUID: "MIG-b", MIGProfile: "1g.10gb"}, Claim: ClaimRef{Namespace: "ns", Name: "dyn", UID: "u2"}},
		{Device: Device{Name: "gpu-0", UUID: "GPU-a"}, Claim: ClaimRef{Namespace: "mon", Name: "agent", UID: "u3"}, Admin: true},
	}, got)

	// Completed, released, corrupted.
	require.NoError(t, store.Put(&checkpoint.ClaimRecord{UID: "u4", Namespace: "ns", Name: "half", State: checkpoint.PrepareCompleted,
		Devices: []checkpoint.Device{{Name: "gpu-2", UUID: "GPU-c"}}}))
	require.NoError(t, store.RemoveHolder("gpu-0", "u1"))
	require.NoError(t, store.AddHolder("gpu-3", checkpoint.Holder{ClaimUID: "u5", Claim: "ns/broken"}))
	require.NoError(t, writeFile(store.Path("u5"), "not a record"))
	got, err = h.Held(context.Background())
	assert.ErrorContains(t, err, "claim u5", "the unreadable claim is named")
	names := map[string]bool{}
	for _, g := range got {
		names[g.Claim.Name] = true
	}
	assert.Equal(t, map[string]bool{"dyn": true, "agent": true, "half": true}, names, "the others are returned")
	assert.NotContains(t, h.records, "u1", "a released claim's record is forgotten")
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
