package sim

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// telemetryServer is a server whose processes live in a temporary
// directory and whose clock the test sets.
func telemetryServer(t *testing.T, profile string) (*Server, string, *time.Time) {
	t.Helper()
	p, err := Parse([]byte(profile))
	require.NoError(t, err)
	s := NewServer(p, "n1")
	dir := t.TempDir()
	s.SetProcessDir(dir)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	s.clock = func() time.Time { return now }
	require.Equal(t, nvml.SUCCESS, s.Init())
	return s, dir, &now
}

// reading is what one GPU reports at once.
type reading struct {
	util                 nvml.Utilization
	utilRet              nvml.Return
	mem                  nvml.Memory
	powerMW, limitMW     uint32
	powerRet             nvml.Return
	temp                 uint32
	clock, maxClock      uint32
	clockRet             nvml.Return
	reasons, throttleOld uint64
}

func read(t *testing.T, d nvml.Device) reading {
	t.Helper()
	var r reading
	var ret nvml.Return
	r.util, r.utilRet = d.GetUtilizationRates()
	r.mem, ret = d.GetMemoryInfo()
	require.Equal(t, nvml.SUCCESS, ret)
	r.powerMW, r.powerRet = d.GetPowerUsage()
	r.limitMW, _ = d.GetEnforcedPowerLimit()
	r.temp, ret = d.GetTemperature(nvml.TEMPERATURE_GPU)
	require.Equal(t, nvml.SUCCESS, ret)
	r.clock, r.clockRet = d.GetClockInfo(nvml.CLOCK_SM)
	r.maxClock, _ = d.GetMaxClockInfo(nvml.CLOCK_SM)
	r.reasons, ret = d.GetCurrentClocksEventReasons()
	require.Equal(t, nvml.SUCCESS, ret)
	r.throttleOld, _ = d.GetCurrentClocksThrottleReasons()
	return r
}

const h100Profile = header + "gpus: [{model: h100-sxm5-80gb, count: 2}]\n"

func TestIdleGPU(t *testing.T) {
	s, _, _ := telemetryServer(t, h100Profile)
	d, _ := s.DeviceGetHandleByIndex(1)
	r := read(t, d)
	assert.Equal(t, nvml.SUCCESS, r.utilRet)
	assert.Equal(t, nvml.Utilization{}, r.util)
	assert.Equal(t, uint64(0), r.mem.Used)
	assert.Equal(t, r.mem.Total, r.mem.Free)
	assert.Equal(t, uint32(70_000), r.powerMW, "idle power of the H100 model")
	assert.Equal(t, uint32(700_000), r.limitMW)
	assert.Equal(t, uint32(29+1), r.temp)
	assert.Equal(t, uint32(345), r.clock, "idle SM clock")
	assert.Equal(t, uint32(1980), r.maxClock)
	assert.Equal(t, uint64(nvml.ClocksEventReasonGpuIdle), r.reasons)
	assert.Equal(t, r.reasons, r.throttleOld, "the deprecated call answers the same")
	_, ret := d.GetTemperature(nvml.TEMPERATURE_COUNT)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
	_, ret = d.GetClockInfo(nvml.CLOCK_MEM)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "only SM/graphics clocks are modelled")
}

func TestBusyGPU(t *testing.T) {
	s, dir, now := telemetryServer(t, h100Profile)
	d, _ := s.DeviceGetHandleByIndex(0)
	other, _ := s.DeviceGetHandleByIndex(1)
	id, _ := d.GetUUID()
	require.NoError(t, WriteProcess(dir, "ctr-1", Process{Name: "demo/pod/main", Devices: []string{id}}))

	first := read(t, d)
	assert.GreaterOrEqual(t, first.util.Gpu, uint32(41), "base 55%..85% minus the waves")
	assert.LessOrEqual(t, first.util.Gpu, uint32(99))
	assert.Greater(t, first.mem.Used, first.mem.Total*3/10-mib)
	assert.Less(t, first.mem.Used, first.mem.Total*7/10)
	assert.Equal(t, first.mem.Total, first.mem.Used+first.mem.Free)
	assert.Greater(t, first.powerMW, uint32(70_000))
	assert.LessOrEqual(t, first.powerMW, uint32(700_000))
	assert.Greater(t, first.temp, uint32(29+20))
	assert.Zero(t, first.reasons&nvml.ClocksEventReasonGpuIdle)
	assert.Equal(t, uint64(0), read(t, other).mem.Used, "the other GPU stays idle")

	// The load changes over time; memory stays what the process holds.
	seen := map[uint32]bool{}
	for i := 0; i < 12; i++ {
		*now = now.Add(7 * time.Second)
		r := read(t, d)
		seen[r.util.Gpu] = true
		assert.Equal(t, first.mem.Used, r.mem.Used)
		if r.reasons&nvml.ClocksEventReasonSwPowerCap != 0 {
			assert.Equal(t, uint32(700_000), r.powerMW, "held at the limit")
			assert.Less(t, r.clock, r.maxClock, "the clock drops under the power cap")
		} else {
			assert.Equal(t, r.maxClock, r.clock)
		}
	}
	assert.Greater(t, len(seen), 3, "utilization over 84 s: %v", seen)

	// A second process: more memory and more load; gone again: idle.
	require.NoError(t, WriteProcess(dir, "ctr-2", Process{Name: "demo/pod2/main", Devices: []string{id}}))
	*now = now.Add(time.Second)
	two := read(t, d)
	assert.Greater(t, two.mem.Used, first.mem.Used)
	require.NoError(t, RemoveProcess(dir, "ctr-1"))
	require.NoError(t, RemoveProcess(dir, "ctr-2"))
	*now = now.Add(time.Second)
	assert.Equal(t, uint64(0), read(t, d).mem.Used)
	assert.Equal(t, uint64(nvml.ClocksEventReasonGpuIdle), read(t, d).reasons)
}

func TestThermalFault(t *testing.T) {
	s, dir, _ := telemetryServer(t, h100Profile)
	d, _ := s.DeviceGetHandleByIndex(0)
	id, _ := d.GetUUID()
	require.NoError(t, WriteProcess(dir, "ctr", Process{Devices: []string{id}}))
	require.NoError(t, s.SetThermal(id, true))
	r := read(t, d)
	assert.Equal(t, uint32(91), r.temp)
	assert.Equal(t, uint32(990), r.clock, "half the boost clock")
	assert.NotZero(t, r.reasons&nvml.ClocksThrottleReasonHwThermalSlowdown)
	assert.NotZero(t, r.reasons&nvml.ClocksEventReasonSwThermalSlowdown)
	require.NoError(t, s.Reset(id))
	r = read(t, d)
	assert.Less(t, r.temp, uint32(91))
	assert.Zero(t, r.reasons&nvml.ClocksThrottleReasonHwThermalSlowdown)

	faults, err := ParseFaults("gpu-0 thermal\n")
	require.NoError(t, err)
	assert.Equal(t, []Fault{{GPU: "gpu-0", Kind: "thermal"}}, faults)
}

func TestModelWithoutPowerOrClocks(t *testing.T) {
	profile := header + `gpus: [{model: tiny}]
models:
  - {name: tiny, productName: Tiny GPU, architecture: Turing, computeCapability: "7.5", memory: 16Gi, pciDeviceID: "0x1EB810DE"}
`
	s, _, _ := telemetryServer(t, profile)
	d, _ := s.DeviceGetHandleByIndex(0)
	r := read(t, d)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, r.powerRet)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, r.clockRet)
	assert.Equal(t, nvml.SUCCESS, r.utilRet, "utilization, memory and temperature need no figures")
	support, ret := d.GpmQueryDeviceSupport()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Zero(t, support.IsSupportedDevice, "GPM starts with Hopper")
	g, _ := s.GpmSampleAlloc()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, d.GpmSampleGet(g))
}

func TestTelemetryFieldsValidated(t *testing.T) {
	for _, fields := range []string{"idlePowerWatts: 10", "idlePowerWatts: 100, powerLimitWatts: 50", "maxSMClockMHz: 1000",
		"idleSMClockMHz: 0, maxSMClockMHz: 1000"} {
		_, err := Parse([]byte(header + `gpus: [{model: tiny}]
models:
  - {name: tiny, productName: Tiny GPU, architecture: Turing, computeCapability: "7.5", memory: 16Gi, pciDeviceID: "0x1EB810DE", ` + fields + "}\n"))
		assert.ErrorContains(t, err, "set both", fields)
	}
}

// TestMIGTelemetry: a GPU in MIG mode has no utilization of its own; its
// MIG devices have their memory use, and GPM their utilization.
func TestMIGTelemetry(t *testing.T) {
	s, dir, now := telemetryServer(t, header+"gpus: [{model: h100-sxm5-80gb, migEnabled: true, migDevices: [3g.40gb, 3g.40gb]}]\n")
	d, _ := s.DeviceGetHandleByIndex(0)
	busy, _ := d.GetMigDeviceHandleByIndex(0)
	idle, _ := d.GetMigDeviceHandleByIndex(1)
	busyUUID, _ := busy.GetUUID()
	busyGI, _ := busy.GetGpuInstanceId()
	idleGI, _ := idle.GetGpuInstanceId()
	require.NoError(t, WriteProcess(dir, "ctr", Process{Devices: []string{busyUUID}}))

	r := read(t, d)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, r.utilRet, "as NVML on a MIG-enabled GPU")
	mb, _ := busy.GetMemoryInfo()
	mi, _ := idle.GetMemoryInfo()
	assert.Greater(t, mb.Used, uint64(0))
	assert.Zero(t, mi.Used)
	assert.Equal(t, mb.Used, r.mem.Used, "the GPU's use is its MIG devices'")
	assert.Zero(t, r.reasons&nvml.ClocksEventReasonGpuIdle)
	_, ret := busy.GetUtilizationRates()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "no utilization on a MIG device handle")
	_, ret = busy.GetPowerUsage()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)

	gpm := func(gi int) (float64, nvml.Return) {
		s1, _ := s.GpmSampleAlloc()
		s2, _ := s.GpmSampleAlloc()
		defer func() { _, _ = s1.Free(), s2.Free() }()
		require.Equal(t, nvml.SUCCESS, s.GpmMigSampleGet(d, gi, s1))
		*now = now.Add(10 * time.Second)
		require.Equal(t, nvml.SUCCESS, s2.MigGet(d, gi))
		mg := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: 3, Sample1: s1, Sample2: s2}
		mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
		mg.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
		mg.Metrics[2].MetricId = uint32(nvml.GPM_METRIC_DRAM_BW_UTIL)
		require.Equal(t, nvml.SUCCESS, s.GpmMetricsGet(mg))
		assert.Equal(t, uint32(nvml.ERROR_NOT_SUPPORTED), mg.Metrics[2].NvmlReturn)
		assert.InDelta(t, mg.Metrics[0].Value*smUtilShare, mg.Metrics[1].Value, 1e-9)
		return mg.Metrics[0].Value, nvml.Return(mg.Metrics[0].NvmlReturn)
	}
	v, ret := gpm(busyGI)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Greater(t, v, 30.0)
	assert.LessOrEqual(t, v, 100.0)
	v, _ = gpm(idleGI)
	assert.Zero(t, v)

	s1, _ := s.GpmSampleAlloc()
	assert.Equal(t, nvml.ERROR_NOT_FOUND, d.GpmMigSampleGet(14, s1), "no such GPU instance")
	require.Equal(t, nvml.SUCCESS, d.GpmMigSampleGet(busyGI, s1))
	mg := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: 1, Sample1: s1, Sample2: s1}
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, s.GpmMetricsGet(mg), "two samples of one moment")
	mg.Version = 7
	assert.Equal(t, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, s.GpmMetricsGet(mg))
	assert.Equal(t, nvml.SUCCESS, s.GpmSampleFree(s1))
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, s1.Free(), "freed twice")
}

func TestProcessRecords(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteProcess(dir, "abc-1", Process{Name: "a", Devices: []string{"GPU-1"}}))
	require.NoError(t, WriteProcess(dir, "abc-1", Process{Name: "b", Devices: []string{"GPU-2"}}))
	got, err := ReadProcesses(dir)
	require.NoError(t, err)
	assert.Equal(t, map[string]Process{"abc-1": {Name: "b", Devices: []string{"GPU-2"}}}, got)
	require.NoError(t, RemoveProcess(dir, "abc-1"))
	require.NoError(t, RemoveProcess(dir, "abc-1"), "removing twice is fine")
	for _, bad := range []string{"", "../x", ".hidden", "a/b"} {
		assert.Error(t, WriteProcess(dir, bad, Process{}), bad)
	}
	got, err = ReadProcesses(dir + "/missing")
	require.NoError(t, err)
	assert.Empty(t, got)
}

// TestLockedProcess: a record with a lock file lives while its lock is
// held (the fake nvidia-cdi-hook's helper in a container), and is removed
// once nobody holds it.
func TestLockedProcess(t *testing.T) {
	dir := t.TempDir()
	lock, err := os.Create(filepath.Join(dir, "ctr.lock"))
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	require.NoError(t, WriteProcess(dir, "ctr", Process{Devices: []string{"GPU-1"}}))
	got, err := ReadProcesses(dir)
	require.NoError(t, err)
	assert.Contains(t, got, "ctr", "the lock is held")
	require.NoError(t, lock.Close()) // the container is gone
	got, err = ReadProcesses(dir)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.NoFileExists(t, filepath.Join(dir, "ctr.json"), "a dead record is removed")
	assert.NoFileExists(t, filepath.Join(dir, "ctr.lock"))
}
