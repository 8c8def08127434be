package libtest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/telemetry"
	"github.com/gpudra/gpudra/test/sim"
)

// TestTelemetryCalls reads utilization, memory, power, temperature, clocks
// and clocks event reasons through go-nvml and the library: an idle GPU,
// then the same GPU while a process (a file in the root's process
// directory, as the fake runtime writes it) uses it.
func TestTelemetryCalls(t *testing.T) {
	root := newRoot(t, "dgx-h100")
	lib := open(t, root)
	dev, ret := lib.DeviceGetHandleByIndex(3)
	ok(t, ret)
	uuid, ret := dev.GetUUID()
	ok(t, ret)

	util, ret := dev.GetUtilizationRates()
	ok(t, ret)
	assert.Equal(t, nvml.Utilization{}, util)
	power, ret := dev.GetPowerUsage()
	ok(t, ret)
	assert.Equal(t, uint32(70_000), power, "mW, idle")
	limit, ret := lib.DeviceGetEnforcedPowerLimit(dev)
	ok(t, ret)
	assert.Equal(t, uint32(700_000), limit)
	reasons, ret := dev.GetCurrentClocksEventReasons()
	ok(t, ret)
	assert.Equal(t, uint64(nvml.ClocksEventReasonGpuIdle), reasons)
	clock, ret := dev.GetClockInfo(nvml.CLOCK_SM)
	ok(t, ret)
	assert.Equal(t, uint32(345), clock)
	maxClock, ret := dev.GetMaxClockInfo(nvml.CLOCK_SM)
	ok(t, ret)
	assert.Equal(t, uint32(1980), maxClock)

	require.NoError(t, sim.WriteProcess(filepath.Join(root, procDir), "c1", sim.Process{Name: "ns/pod/ctr", Devices: []string{uuid}}))
	time.Sleep(600 * time.Millisecond) // the library rereads the directory every 500 ms
	util, ret = dev.GetUtilizationRates()
	ok(t, ret)
	assert.Greater(t, util.Gpu, uint32(40))
	mem, ret := dev.GetMemoryInfo()
	ok(t, ret)
	assert.Greater(t, mem.Used, mem.Total/4)
	assert.Equal(t, mem.Total, mem.Used+mem.Free)
	mem2, ret := dev.GetMemoryInfo_v2()
	ok(t, ret)
	assert.Equal(t, mem.Used, mem2.Used)
	power, ret = dev.GetPowerUsage()
	ok(t, ret)
	assert.Greater(t, power, uint32(300_000))
	temp, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
	ok(t, ret)
	assert.Greater(t, temp, uint32(45))
	old, ret := dev.GetCurrentClocksThrottleReasons()
	ok(t, ret)
	assert.Zero(t, old&nvml.ClocksThrottleReasonGpuIdle)

	other, ret := lib.DeviceGetHandleByIndex(4)
	ok(t, ret)
	util, ret = other.GetUtilizationRates()
	ok(t, ret)
	assert.Zero(t, util.Gpu, "a GPU no process uses stays idle")
}

// TestGPMPerMIGUtilization: a Hopper GPU in MIG mode answers no
// utilization of its own; GPM samples of a GPU instance give its MIG
// device's. An Ampere GPU has no GPM.
func TestGPMPerMIGUtilization(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "mig.yaml")
	require.NoError(t, os.WriteFile(profile, []byte(`name: migtest
driverVersion: "570.124.06"
cudaDriverVersion: "12.8"
gpus:
  - {model: h100-sxm5-80gb, migEnabled: true, migDevices: [3g.40gb, 3g.40gb]}
  - {model: a100-sxm4-40gb}
`), 0o644))
	root := newRoot(t, profile)
	lib := open(t, root)
	gpu, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, ret)
	_, ret = gpu.GetUtilizationRates()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "no utilization on a MIG-enabled GPU")
	support, ret := lib.GpmQueryDeviceSupport(gpu)
	ok(t, ret)
	require.Equal(t, uint32(1), support.IsSupportedDevice)
	mig0, ret := gpu.GetMigDeviceHandleByIndex(0)
	ok(t, ret)
	migUUID, ret := mig0.GetUUID()
	ok(t, ret)
	gi, ret := mig0.GetGpuInstanceId()
	ok(t, ret)
	require.NoError(t, sim.WriteProcess(filepath.Join(root, procDir), "c1", sim.Process{Devices: []string{migUUID}}))
	time.Sleep(600 * time.Millisecond)

	mem, ret := mig0.GetMemoryInfo()
	ok(t, ret)
	assert.Greater(t, mem.Used, uint64(0), "memory per MIG device")
	s1, ret := lib.GpmSampleAlloc()
	ok(t, ret)
	s2, ret := lib.GpmSampleAlloc()
	ok(t, ret)
	defer func() { ok(t, lib.GpmSampleFree(s1)); ok(t, s2.Free()) }()
	ok(t, lib.GpmMigSampleGet(gpu, gi, s1))
	time.Sleep(150 * time.Millisecond) // NVML wants more than 100 ms between samples
	ok(t, s2.MigGet(gpu, gi))
	mg := &nvml.GpmMetricsGetType{NumMetrics: 2, Sample1: s1, Sample2: s2}
	mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
	mg.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_DRAM_BW_UTIL)
	ok(t, lib.GpmMetricsGet(mg))
	assert.Equal(t, uint32(nvml.SUCCESS), mg.Metrics[0].NvmlReturn)
	assert.Greater(t, mg.Metrics[0].Value, 30.0)
	assert.Equal(t, uint32(nvml.ERROR_NOT_SUPPORTED), mg.Metrics[1].NvmlReturn, "per metric")
	ok(t, lib.GpmSampleGet(gpu, s2))
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, lib.GpmMetricsGet(mg), "samples of a GPU instance and of the GPU")

	a100, ret := lib.DeviceGetHandleByIndex(1)
	ok(t, ret)
	support, ret = lib.GpmQueryDeviceSupport(a100)
	ok(t, ret)
	assert.Zero(t, support.IsSupportedDevice)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, lib.GpmSampleGet(a100, s1))
}

// TestSamplerThroughLibrary runs internal/plugin/telemetry's sampler on the library: a
// busy MIG device of an H100 gets its utilization from GPM from the second
// sample on, the GPU in MIG mode none, the A100 beside it every GPU field.
func TestSamplerThroughLibrary(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "mig.yaml")
	require.NoError(t, os.WriteFile(profile, []byte(`name: migtest
driverVersion: "570.124.06"
cudaDriverVersion: "12.8"
gpus:
  - {model: h100-sxm5-80gb, migEnabled: true, migDevices: [3g.40gb, 3g.40gb]}
  - {model: a100-sxm4-40gb}
`), 0o644))
	root := newRoot(t, profile)
	lib := open(t, root)
	node, err := discovery.Discover(ctx(t), lib, discovery.Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	devices := telemetry.DevicesOf(node)
	require.Len(t, devices, 4)
	mig := devices[1]
	require.NoError(t, sim.WriteProcess(filepath.Join(root, procDir), "c1", sim.Process{Devices: []string{mig.UUID}}))
	time.Sleep(600 * time.Millisecond)

	s := telemetry.New(telemetry.Config{Node: "node-a", Lib: lib, Devices: devices})
	defer s.Close()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, s.Register(reg))
	fields := func() map[string]map[string]float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "device" {
						if out[l.GetValue()] == nil {
							out[l.GetValue()] = map[string]float64{}
						}
						out[l.GetValue()][f.GetName()] = m.GetGauge().GetValue()
					}
				}
			}
		}
		return out
	}
	s.SampleOnce(ctx(t))
	assert.NotContains(t, fields()[mig.Name], telemetry.MetricUtilization, "GPM needs two samples")
	time.Sleep(200 * time.Millisecond)
	s.SampleOnce(ctx(t))
	got := fields()
	assert.Greater(t, got[mig.Name][telemetry.MetricUtilization], 0.3, "per-MIG utilization through go-nvml's GPM")
	assert.Greater(t, got[mig.Name][telemetry.MetricMemoryUsed], 0.0)
	assert.NotContains(t, got[mig.Name], telemetry.MetricPower)
	assert.NotContains(t, got[devices[0].Name], telemetry.MetricUtilization, "a GPU in MIG mode")
	a100 := got[devices[3].Name]
	for _, m := range []string{telemetry.MetricUtilization, telemetry.MetricPower, telemetry.MetricPowerLimit,
		telemetry.MetricTemperature, telemetry.MetricSMClock, telemetry.MetricSMClockMax, telemetry.MetricMemoryTotal} {
		assert.Contains(t, a100, m)
	}
	assert.Equal(t, 400.0, a100[telemetry.MetricPowerLimit])
}
