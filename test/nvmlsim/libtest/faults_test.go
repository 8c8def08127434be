package libtest

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func appendFault(t *testing.T, root, line string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, faultFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(line + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// waitEvent waits up to 10 s for the next event on set.
func waitEvent(t *testing.T, set nvml.EventSet) nvml.EventData {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ev, ret := set.Wait(500)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		ok(t, ret)
		return ev
	}
	t.Fatal("no NVML event within 10s")
	return nvml.EventData{}
}

// TestXIDEvent: a fault appended to the fault file arrives through an
// event set (nvmlEventSetWait_v2), for the device handle the caller holds,
// with the recovery action and ECC counters the health probe reads.
func TestXIDEvent(t *testing.T) {
	root := newRoot(t, "dgx-a100")
	lib := open(t, root)
	dev, ret := lib.DeviceGetHandleByIndex(1)
	ok(t, ret)
	uuid, ret := dev.GetUUID()
	ok(t, ret)
	set, ret := lib.EventSetCreate()
	ok(t, ret)
	defer func() { ok(t, set.Free()) }()
	supported, ret := dev.GetSupportedEventTypes()
	ok(t, ret)
	mask := supported & (nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
	require.EqualValues(t, nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, mask)
	ok(t, dev.RegisterEvents(mask, set))
	_, ret = set.Wait(20)
	require.Equal(t, nvml.ERROR_TIMEOUT, ret)

	appendFault(t, root, "gpu-1 xid 48")
	ev := waitEvent(t, set)
	require.EqualValues(t, nvml.EventTypeXidCriticalError, ev.EventType)
	require.EqualValues(t, 48, ev.EventData)
	require.Equal(t, dev, ev.Device, "the event names the caller's handle (the health monitor maps it)")
	got, ret := ev.Device.GetUUID()
	ok(t, ret)
	require.Equal(t, uuid, got)
	require.EqualValues(t, 0xFFFFFFFF, ev.GpuInstanceId)

	appendFault(t, root, "gpu-1 ecc")
	ev = waitEvent(t, set)
	require.EqualValues(t, nvml.EventTypeDoubleBitEccError, ev.EventType)

	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	ok(t, dev.GetFieldValues(values))
	ok(t, nvml.Return(values[0].NvmlReturn))
	require.Equal(t, uint32(nvml.GPU_RECOVERY_ACTION_GPU_RESET), binary.LittleEndian.Uint32(values[0].Value[:4]))
	ecc, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	ok(t, ret)
	require.EqualValues(t, 2, ecc, "XID 48 and the ECC fault")

	other, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, ret)
	ecc, ret = other.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	ok(t, ret)
	require.Zero(t, ecc, "other GPUs are healthy")
}

// TestLostGPU: "lost" in the fault file makes the health queries fail with
// GPU_IS_LOST; removing it resets the GPU.
func TestLostGPU(t *testing.T) {
	root := newRoot(t, "l4")
	lib := open(t, root)
	dev, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, ret)
	_, ret = dev.GetMemoryInfo()
	ok(t, ret)

	appendFault(t, root, "gpu-0 lost")
	require.Eventually(t, func() bool {
		_, ret := dev.GetMemoryInfo()
		return ret == nvml.ERROR_GPU_IS_LOST
	}, 10*time.Second, 20*time.Millisecond)
	_, ret = dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	require.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
	_, ret = dev.GetUUID()
	require.Equal(t, nvml.ERROR_GPU_IS_LOST, ret, "a lost GPU does not even tell its UUID")
	_, ret = lib.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.ERROR_GPU_IS_LOST, ret, "nor give its handle")
	n, ret := lib.DeviceGetCount()
	ok(t, ret)
	require.Equal(t, 2, n, "NVML still counts it")

	require.NoError(t, os.WriteFile(filepath.Join(root, faultFile), nil, 0o644))
	require.Eventually(t, func() bool {
		_, ret := dev.GetMemoryInfo()
		return ret == nvml.SUCCESS
	}, 10*time.Second, 20*time.Millisecond)
}

// TestConcurrentCalls: many caller threads in the library at once, one of
// them blocked in nvmlEventSetWait.
func TestConcurrentCalls(t *testing.T) {
	root := newRoot(t, staticMIG)
	lib := open(t, root)
	set, ret := lib.EventSetCreate()
	ok(t, ret)
	defer func() { ok(t, set.Free()) }()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, ret := set.Wait(5)
			assert.Equal(t, nvml.ERROR_TIMEOUT, ret)
		}
	}()
	var callers sync.WaitGroup
	for g := range 8 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			for i := range 200 {
				// assert, not require: these run outside the test goroutine.
				dev, ret := lib.DeviceGetHandleByIndex((g + i) % 2)
				if !assert.Equal(t, nvml.SUCCESS, ret) {
					return
				}
				_, ret = dev.GetUUID()
				assert.Equal(t, nvml.SUCCESS, ret)
				_, ret = dev.GetPciInfo()
				assert.Equal(t, nvml.SUCCESS, ret)
				_, _, ret = dev.GetMigMode()
				assert.Equal(t, nvml.SUCCESS, ret)
				if m, ret := dev.GetMigDeviceHandleByIndex(0); ret == nvml.SUCCESS {
					_, ret = m.GetAttributes()
					assert.Equal(t, nvml.SUCCESS, ret)
				}
			}
		}()
	}
	callers.Wait()
	close(stop)
	wg.Wait()
}
