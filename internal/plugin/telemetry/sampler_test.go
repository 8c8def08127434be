package telemetry

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
)

func testCtx(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

// fakePods answers from a map and records what it was asked to forget.
type fakePods struct {
	pods map[string][]string // by claim UID
	kept map[string]bool
}

func (f *fakePods) Pods(_ context.Context, c ClaimRef) []string { return f.pods[c.UID] }
func (f *fakePods) Forget(keep map[string]bool)                 { f.kept = keep }

// TestMetricsText is the /metrics text of a node with a busy GPU held by a
// claim of one pod and a free GPU that lacks power readings.
func TestMetricsText(t *testing.T) {
	free := h100("GPU-b")
	free.util, free.used, free.temp, free.clock, free.events = 0, 0, 31, 345, 0x1
	free.fail = map[string]nvml.Return{fieldPower: nvml.ERROR_NOT_SUPPORTED, fieldPowerLimit: nvml.ERROR_NOT_SUPPORTED}
	claim := ClaimRef{Namespace: "demo", Name: "train-gpu", UID: "uid-1"}
	s := New(Config{Node: "node-a", Lib: fakeLib(nil, h100("GPU-a"), free),
		Devices: []Device{{Name: "gpu-0", UUID: "GPU-a"}, {Name: "gpu-1", UUID: "GPU-b"}},
		Held: func(context.Context) ([]Holding, error) {
			return []Holding{{Device: Device{Name: "gpu-0", UUID: "GPU-a"}, Claim: claim}}, nil
		},
		Pods: &fakePods{pods: map[string][]string{"uid-1": {"train"}}},
	})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, s.Register(reg))
	s.SampleOnce(testCtx(t))
	s.ObserveXID("GPU-b", 13)
	s.ObserveXID("GPU-b", 13)

	// The exposition lists labels in name order.
	busy := `claim_name="train-gpu",claim_namespace="demo",device="gpu-0",mig_profile="",node="node-a",pod_name="train",pod_namespace="demo",uuid="GPU-a"`
	idle := `claim_name="",claim_namespace="",device="gpu-1",mig_profile="",node="node-a",pod_name="",pod_namespace="",uuid="GPU-b"`
	want := `
# HELP gpudra_gpu_utilization_ratio Fraction of the last sample period during which kernels ran on the device (MIG devices: GPM graphics activity between two samples).
# TYPE gpudra_gpu_utilization_ratio gauge
gpudra_gpu_utilization_ratio{` + busy + `} 0.87
gpudra_gpu_utilization_ratio{` + idle + `} 0
# HELP gpudra_gpu_memory_used_bytes Device memory in use, bytes.
# TYPE gpudra_gpu_memory_used_bytes gauge
gpudra_gpu_memory_used_bytes{` + busy + `} 3.221225472e+10
gpudra_gpu_memory_used_bytes{` + idle + `} 0
# HELP gpudra_gpu_power_watts Power draw of the GPU, watts.
# TYPE gpudra_gpu_power_watts gauge
gpudra_gpu_power_watts{` + busy + `} 612.5
# HELP gpudra_gpu_temperature_celsius GPU core temperature, degrees Celsius.
# TYPE gpudra_gpu_temperature_celsius gauge
gpudra_gpu_temperature_celsius{` + busy + `} 71
gpudra_gpu_temperature_celsius{` + idle + `} 31
# HELP gpudra_gpu_sm_clock_hertz Current SM clock, hertz.
# TYPE gpudra_gpu_sm_clock_hertz gauge
gpudra_gpu_sm_clock_hertz{` + busy + `} 1.83e+09
gpudra_gpu_sm_clock_hertz{` + idle + `} 3.45e+08
# HELP gpudra_gpu_xid_errors_total XID errors reported by the driver for the GPU since the plugin started, by XID (ignored ones included).
# TYPE gpudra_gpu_xid_errors_total counter
gpudra_gpu_xid_errors_total{device="gpu-1",node="node-a",uuid="GPU-b",xid="13"} 2
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), MetricUtilization, MetricMemoryUsed,
		MetricPower, MetricTemperature, MetricSMClock, MetricXIDs))

	// Throttle reasons: every known reason, 1 where the mask has it.
	active := map[string]map[string]float64{}
	for _, m := range gather(t, reg, MetricThrottleReason) {
		l := labelMap(m)
		if active[l["device"]] == nil {
			active[l["device"]] = map[string]float64{}
		}
		active[l["device"]][l["reason"]] = m.GetGauge().GetValue()
	}
	assert.Len(t, active["gpu-0"], len(throttleReasons))
	assert.Equal(t, 1.0, active["gpu-0"]["sw_power_cap"])
	assert.Equal(t, 0.0, active["gpu-0"]["gpu_idle"])
	assert.Equal(t, 1.0, active["gpu-1"]["gpu_idle"])
	assert.Equal(t, 0.0, active["gpu-1"]["hw_thermal_slowdown"])
}

func gather(t *testing.T, reg prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestReadFields: a field NVML does not answer is left out, alone; a lost
// GPU has no series; optional functions missing from the library are
// never called.
func TestReadFields(t *testing.T) {
	all := []string{fieldUtilization, fieldMemoryUsed, fieldMemoryTotal, fieldPower, fieldPowerLimit, fieldTemperature,
		fieldSMClock, fieldSMClockMax, fieldReasons}
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(f string) bool { return slices.Contains(drop, f) })
	}
	for _, tc := range []struct {
		name    string
		fail    map[string]nvml.Return
		missing []string // NVML symbols the library lacks
		want    []string // fields read; nil: no series at all
		reasons float64
	}{
		{name: "everything", want: all, reasons: 0x4},
		{name: "L4-like: no power readings", fail: map[string]nvml.Return{fieldPower: nvml.ERROR_NOT_SUPPORTED,
			fieldPowerLimit: nvml.ERROR_NOT_SUPPORTED}, want: without(fieldPower, fieldPowerLimit), reasons: 0x4},
		{name: "MIG-enabled GPU: no utilization", fail: map[string]nvml.Return{fieldUtilization: nvml.ERROR_NOT_SUPPORTED},
			want: without(fieldUtilization), reasons: 0x4},
		{name: "a failing field", fail: map[string]nvml.Return{fieldTemperature: nvml.ERROR_UNKNOWN},
			want: without(fieldTemperature), reasons: 0x4},
		{name: "no memory reading", fail: map[string]nvml.Return{fieldMemoryUsed: nvml.ERROR_NOT_SUPPORTED},
			want: without(fieldMemoryUsed, fieldMemoryTotal), reasons: 0x4},
		{name: "lost GPU", fail: map[string]nvml.Return{"handle": nvml.ERROR_GPU_IS_LOST}},
		{name: "lost after its handle was taken", fail: map[string]nvml.Return{fieldMemoryUsed: nvml.ERROR_GPU_IS_LOST}},
		{name: "driver before R535: throttle reasons", missing: []string{symClocksEventReasons}, want: all,
			reasons: 0x4 | 1<<40},
		{name: "no reasons function at all", missing: []string{symClocksEventReasons, symClocksThrottleReasons},
			want: without(fieldReasons)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := h100("GPU-a")
			g.fail = tc.fail
			r := newReader(fakeLib(tc.missing, g))
			got, ok := r.read(testCtx(t), Device{Name: "gpu-0", UUID: "GPU-a"})
			if tc.want == nil {
				assert.False(t, ok)
				return
			}
			require.True(t, ok)
			assert.ElementsMatch(t, tc.want, slices.Collect(maps.Keys(got)))
			if tc.reasons != 0 {
				assert.Equal(t, tc.reasons, got[fieldReasons])
			}
		})
	}
}

// TestLostGPUComesBack: a GPU whose handle is lost is looked up again.
func TestLostGPUComesBack(t *testing.T) {
	g := h100("GPU-a")
	g.fail = map[string]nvml.Return{fieldMemoryUsed: nvml.ERROR_GPU_IS_LOST}
	lib := fakeLib(nil, g)
	s := New(Config{Node: "n", Lib: lib, Devices: []Device{{Name: "gpu-0", UUID: "GPU-a"}}})
	s.SampleOnce(testCtx(t))
	assert.Empty(t, s.last.Load().series)
	g.fail = nil
	lib.DeviceGetHandleByUUIDFunc = fakeLib(nil, g).DeviceGetHandleByUUIDFunc
	s.SampleOnce(testCtx(t))
	require.Len(t, s.last.Load().series, 1)
	assert.Equal(t, 0.87, s.last.Load().series[0].reading[fieldUtilization])
}

func TestLabelSets(t *testing.T) {
	gpu0 := Device{Name: "gpu-0", UUID: "GPU-a"}
	mig := Device{Name: "gpu-1-mig-3g40gb-4", UUID: "MIG-b", MIGProfile: "3g.40gb"}
	c1 := ClaimRef{Namespace: "ns", Name: "c1", UID: "u1"}
	c2 := ClaimRef{Namespace: "ns", Name: "c2", UID: "u2"}
	pods := &fakePods{pods: map[string][]string{"u1": {"p1"}, "u2": {"p2", "p3"}}}
	free := func(d Device) []string { return []string{d.Name, d.UUID, d.MIGProfile, "", "", "", ""} }
	for _, tc := range []struct {
		name     string
		dev      Device
		holdings []Holding
		pods     PodSource
		want     [][]string
	}{
		{name: "free GPU", dev: gpu0, pods: pods, want: [][]string{free(gpu0)}},
		{name: "held by another device's claim", dev: gpu0, pods: pods,
			holdings: []Holding{{Device: mig, Claim: c1}}, want: [][]string{free(gpu0)}},
		{name: "claim with a pod", dev: gpu0, pods: pods, holdings: []Holding{{Device: gpu0, Claim: c1}},
			want: [][]string{{"gpu-0", "GPU-a", "", "ns", "c1", "ns", "p1"}}},
		{name: "claim shared by two pods", dev: gpu0, pods: pods, holdings: []Holding{{Device: gpu0, Claim: c2}},
			want: [][]string{{"gpu-0", "GPU-a", "", "ns", "c2", "ns", "p2"}, {"gpu-0", "GPU-a", "", "ns", "c2", "ns", "p3"}}},
		{name: "pods unknown", dev: gpu0, pods: nil, holdings: []Holding{{Device: gpu0, Claim: c1}},
			want: [][]string{{"gpu-0", "GPU-a", "", "ns", "c1", "", ""}}},
		{name: "two claims (shares)", dev: gpu0, pods: pods,
			holdings: []Holding{{Device: gpu0, Claim: c1}, {Device: gpu0, Claim: c2}, {Device: gpu0, Claim: c1}},
			want: [][]string{{"gpu-0", "GPU-a", "", "ns", "c1", "ns", "p1"}, {"gpu-0", "GPU-a", "", "ns", "c2", "ns", "p2"},
				{"gpu-0", "GPU-a", "", "ns", "c2", "ns", "p3"}}},
		{name: "admin access labels nothing", dev: gpu0, pods: pods,
			holdings: []Holding{{Device: gpu0, Claim: c1, Admin: true}}, want: [][]string{free(gpu0)}},
		{name: "admin beside a workload", dev: gpu0, pods: pods,
			holdings: []Holding{{Device: gpu0, Claim: c1, Admin: true}, {Device: gpu0, Claim: c2}},
			want:     [][]string{{"gpu-0", "GPU-a", "", "ns", "c2", "ns", "p2"}, {"gpu-0", "GPU-a", "", "ns", "c2", "ns", "p3"}}},
		{name: "MIG device", dev: mig, pods: pods, holdings: []Holding{{Device: mig, Claim: c1}},
			want: [][]string{{"gpu-1-mig-3g40gb-4", "MIG-b", "3g.40gb", "ns", "c1", "ns", "p1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, labelSets(testCtx(t), tc.dev, tc.holdings, tc.pods))
		})
	}
}

// TestHeldDevicesJoin: a device that only exists while held (dynamic MIG)
// is sampled; a claim released is forgotten by the pod source.
func TestHeldDevicesJoin(t *testing.T) {
	static := []Device{{Name: "gpu-0", UUID: "GPU-a"}}
	dyn := Device{Name: "gpu-0-mig-1g10gb-3", UUID: "MIG-x", MIGProfile: "1g.10gb"}
	got := devicesOf(static, []Holding{{Device: static[0]}, {Device: dyn}, {Device: dyn}})
	assert.Equal(t, []Device{static[0], dyn}, got)

	pods := &fakePods{}
	held := []Holding{{Device: static[0], Claim: ClaimRef{UID: "u1"}}}
	s := New(Config{Node: "n", Lib: fakeLib(nil, h100("GPU-a")), Devices: static, Pods: pods,
		Held: func(context.Context) ([]Holding, error) { return held, nil }})
	s.SampleOnce(testCtx(t))
	assert.Equal(t, map[string]bool{"u1": true}, pods.kept)
	held = nil
	s.SampleOnce(testCtx(t))
	assert.Empty(t, pods.kept)
}
