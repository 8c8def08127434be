package nvmlsim

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// The Library called directly with Go memory, as the C exports call it.
// test/nvmlsim/libtest checks the same through the built library.

type fixture struct {
	t      *testing.T
	l      *Library
	root   string
	stderr *syncBuffer
	env    map[string]string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newFixture(t *testing.T, profile string) *fixture {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, WriteConfig(root, Config{Profile: profile, Node: "node-a",
		StateFile: "var/lib/gpudra-sim/nvml-state.json", FaultFile: "var/lib/gpudra-sim/faults"}))
	f := &fixture{t: t, root: root, stderr: &syncBuffer{}, env: map[string]string{RootEnv: root}}
	f.l = New(func(k string) string { return f.env[k] }, nil)
	f.l.Stderr = f.stderr
	return f
}

func (f *fixture) init() {
	f.t.Helper()
	require.Equal(f.t, nvml.SUCCESS, f.l.Init(), f.stderr.String())
	f.t.Cleanup(func() { _ = f.l.Shutdown() })
}

func (f *fixture) gpu(i int) uintptr {
	f.t.Helper()
	var h uintptr
	require.Equal(f.t, nvml.SUCCESS, f.l.DeviceGetHandleByIndex("test", uint32(i), unsafe.Pointer(&h)))
	return h
}

func (f *fixture) uuid(h uintptr) string {
	f.t.Helper()
	buf := make([]byte, nvml.DEVICE_UUID_V2_BUFFER_SIZE)
	require.Equal(f.t, nvml.SUCCESS, f.l.DeviceGetUUID(h, unsafe.Pointer(&buf[0]), uint32(len(buf))))
	return string(buf[:bytes.IndexByte(buf, 0)])
}

func (f *fixture) faults(content string) {
	f.t.Helper()
	writeFile(f.t, filepath.Join(f.root, "var/lib/gpudra-sim/faults"), content)
}

func TestInitErrors(t *testing.T) {
	f := newFixture(t, "l4")
	f.env[RootEnv] = t.TempDir()
	require.Equal(t, nvml.ERROR_DRIVER_NOT_LOADED, f.l.Init())
	require.Contains(t, f.stderr.String(), "nvmlInit failed: "+RootEnv+"="+f.env[RootEnv])

	f.env[RootEnv] = f.root
	require.NoError(t, WriteConfig(f.root, Config{Profile: "h1000", Node: "n"}))
	require.Equal(t, nvml.ERROR_UNKNOWN, f.l.Init())
	require.Contains(t, f.stderr.String(), filepath.Join(f.root, ConfigPath)+`: unknown simulation profile "h1000"`)

	writeFile(t, filepath.Join(f.root, "state.json"), `{"node": "other", "profile": "l4", "gpus": []}`)
	require.NoError(t, WriteConfig(f.root, Config{Profile: "l4", Node: "n", StateFile: "state.json"}))
	require.Equal(t, nvml.ERROR_UNKNOWN, f.l.Init())
	require.Contains(t, f.stderr.String(), "MIG state file "+filepath.Join(f.root, "state.json"))

	var n uint32
	require.Equal(t, nvml.ERROR_UNINITIALIZED, f.l.DeviceGetCount("test", unsafe.Pointer(&n)))
	require.Equal(t, nvml.ERROR_UNINITIALIZED, f.l.Shutdown())
}

// OnOpen runs once per built node: not after a failed Init, not after one
// that only counts, again after the last Shutdown and a new Init.
func TestOnOpen(t *testing.T) {
	f := newFixture(t, "l4")
	opened := 0
	f.l.OnOpen = func() { opened++ }
	root := f.env[RootEnv]
	f.env[RootEnv] = t.TempDir()
	require.Equal(t, nvml.ERROR_DRIVER_NOT_LOADED, f.l.Init())
	require.Zero(t, opened, "a failed Init")
	f.env[RootEnv] = root
	require.Equal(t, nvml.SUCCESS, f.l.Init())
	require.Equal(t, nvml.SUCCESS, f.l.Init())
	require.Equal(t, 1, opened, "the second Init only counts")
	require.Equal(t, nvml.SUCCESS, f.l.Shutdown())
	require.Equal(t, nvml.SUCCESS, f.l.Shutdown())
	require.Equal(t, nvml.SUCCESS, f.l.Init())
	require.Equal(t, 2, opened, "a new node after the last Shutdown")
	require.Equal(t, nvml.SUCCESS, f.l.Shutdown())
}

func TestRefcount(t *testing.T) {
	f := newFixture(t, "l4")
	require.Equal(t, nvml.SUCCESS, f.l.Init())
	require.Equal(t, nvml.SUCCESS, f.l.Init())
	h := f.gpu(0)
	require.Equal(t, nvml.SUCCESS, f.l.Shutdown())
	var n uint32
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetCount("test", unsafe.Pointer(&n)), "one Init left")
	require.EqualValues(t, 2, n, "the l4 profile has two GPUs")
	require.Equal(t, nvml.SUCCESS, f.l.Shutdown())
	require.Equal(t, nvml.ERROR_UNINITIALIZED, f.l.DeviceGetCount("test", unsafe.Pointer(&n)))
	require.Equal(t, nvml.ERROR_UNINITIALIZED, f.l.DeviceGetMinorNumber(h, unsafe.Pointer(&n)))
	require.Equal(t, nvml.ERROR_UNINITIALIZED, f.l.Shutdown())

	f.init()
	require.Equal(t, h, f.gpu(0), "a GPU keeps its handle across nvmlShutdown/nvmlInit, as in NVML")
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetMinorNumber(h, unsafe.Pointer(&n)))
}

func TestDeviceQueries(t *testing.T) {
	f := newFixture(t, "dgx-h100")
	f.init()
	h := f.gpu(3)
	id := f.uuid(h)
	require.Regexp(t, "^GPU-", id)

	var byUUID, byBus uintptr
	cid := append([]byte(id), 0)
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetHandleByUUID(unsafe.Pointer(&cid[0]), unsafe.Pointer(&byUUID)))
	require.Equal(t, h, byUUID)
	bus := []byte("0000:61:00.0\x00")
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetHandleByPciBusId("test", unsafe.Pointer(&bus[0]), unsafe.Pointer(&byBus)))
	require.Equal(t, h, byBus)
	missing := []byte("GPU-nope\x00")
	require.Equal(t, nvml.ERROR_NOT_FOUND, f.l.DeviceGetHandleByUUID(unsafe.Pointer(&missing[0]), unsafe.Pointer(&byUUID)))

	small := make([]byte, 10)
	require.Equal(t, nvml.ERROR_INSUFFICIENT_SIZE, f.l.DeviceGetUUID(h, unsafe.Pointer(&small[0]), uint32(len(small))))

	var pci nvml.PciInfo
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetPciInfo("test", h, unsafe.Pointer(&pci)))
	require.EqualValues(t, 0x61, pci.Bus)

	var mem2 nvml.Memory_v2
	require.Equal(t, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, f.l.DeviceGetMemoryInfo_v2(h, unsafe.Pointer(&mem2)))
	mem2.Version = nvml.STRUCT_VERSION(mem2, 2)
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetMemoryInfo_v2(h, unsafe.Pointer(&mem2)))
	require.Greater(t, mem2.Total, uint64(80e9))

	var status nvml.GpuP2PStatus
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetP2PStatus(h, f.gpu(0), int32(nvml.P2P_CAPS_INDEX_NVLINK), unsafe.Pointer(&status)))
	require.Equal(t, nvml.P2P_STATUS_OK, status)

	var major, minor int32
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetCudaComputeCapability(h, unsafe.Pointer(&major), unsafe.Pointer(&minor)))
	require.Equal(t, [2]int32{9, 0}, [2]int32{major, minor})
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, f.l.DeviceGetCudaComputeCapability(h, nil, unsafe.Pointer(&minor)))

	var n uint32
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, f.l.DeviceGetMinorNumber(0xdead0, unsafe.Pointer(&n)), "unknown handle")
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, f.l.NotSupported("nvmlDeviceGetPowerUsage"))
}

func TestEventsFromFaultFile(t *testing.T) {
	f := newFixture(t, "dgx-a100")
	f.env[TraceEnv] = filepath.Join(t.TempDir(), "trace")
	f.init()
	gpu1 := f.gpu(1)
	gpu0 := f.gpu(0) // before it is lost: a lost GPU's handle cannot be looked up

	var set uintptr
	require.Equal(t, nvml.SUCCESS, f.l.EventSetCreate(unsafe.Pointer(&set)))
	var types uint64
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetSupportedEventTypes(gpu1, unsafe.Pointer(&types)))
	require.Equal(t, nvml.SUCCESS, f.l.DeviceRegisterEvents(gpu1, types&nvml.EventTypeXidCriticalError, set))
	var ev cEventData
	require.Equal(t, nvml.ERROR_TIMEOUT, f.l.EventSetWait("test", set, unsafe.Pointer(&ev), 10))

	f.faults("gpu-1 xid 48\n")
	require.Equal(t, nvml.SUCCESS, f.l.EventSetWait("test", set, unsafe.Pointer(&ev), 5000))
	require.Equal(t, cEventData{Device: gpu1, EventType: nvml.EventTypeXidCriticalError, EventData: 48,
		GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}, ev)

	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}, {FieldId: nvml.FI_DEV_POWER_INSTANT}}
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetFieldValues(gpu1, 2, unsafe.Pointer(&values[0])))
	require.EqualValues(t, nvml.SUCCESS, values[0].NvmlReturn)
	require.EqualValues(t, nvml.GPU_RECOVERY_ACTION_GPU_RESET, values[0].Value[0])
	require.EqualValues(t, nvml.ERROR_NOT_SUPPORTED, values[1].NvmlReturn)
	var ecc uint64
	require.Equal(t, nvml.SUCCESS, f.l.DeviceGetTotalEccErrors(gpu1, int32(nvml.MEMORY_ERROR_TYPE_UNCORRECTED), int32(nvml.VOLATILE_ECC), unsafe.Pointer(&ecc)))
	require.EqualValues(t, 1, ecc, "XID 48 is a double-bit ECC error")

	f.faults("gpu-1 xid 48\ngpu-0 lost\n")
	var mem nvml.Memory
	require.Eventually(t, func() bool {
		return f.l.DeviceGetMemoryInfo(gpu0, unsafe.Pointer(&mem)) == nvml.ERROR_GPU_IS_LOST
	}, 5*time.Second, 10*time.Millisecond)
	f.faults("")
	require.Eventually(t, func() bool {
		return f.l.DeviceGetMemoryInfo(gpu0, unsafe.Pointer(&mem)) == nvml.SUCCESS
	}, 5*time.Second, 10*time.Millisecond, "an emptied fault file resets the GPUs")

	require.Equal(t, nvml.SUCCESS, f.l.EventSetFree(set))
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, f.l.EventSetWait("test", set, unsafe.Pointer(&ev), 1))

	_ = f.l.NotSupported("nvmlDeviceGetPowerUsage")
	trace, err := os.ReadFile(f.env[TraceEnv])
	require.NoError(t, err)
	require.Contains(t, string(trace), "nvml nvmlDeviceRegisterEvents\n")
	require.Contains(t, string(trace), "nvml nvmlDeviceGetPowerUsage (not simulated)\n", "a stub call is traced")
}

func TestEventSetsEndWithTheSession(t *testing.T) {
	f := newFixture(t, "l4")
	require.Equal(t, nvml.SUCCESS, f.l.Init())
	var set uintptr
	require.Equal(t, nvml.SUCCESS, f.l.EventSetCreate(unsafe.Pointer(&set)))
	require.Equal(t, nvml.SUCCESS, f.l.Shutdown())
	f.init()
	var ev cEventData
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, f.l.EventSetWait("test", set, unsafe.Pointer(&ev), 1))
}

func TestPanicIsAnError(t *testing.T) {
	f := newFixture(t, "l4")
	f.init()
	ret := f.l.onDevice("nvmlDeviceGetBoom", f.gpu(0), func(nvml.Device) nvml.Return { panic("boom") })
	require.Equal(t, nvml.ERROR_UNKNOWN, ret, "a bug in the library must not end the caller's process")
	require.Contains(t, f.stderr.String(), "nvmlDeviceGetBoom panicked (returning ERROR_UNKNOWN): boom")
}
