package sim

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A lost GPU answers nothing, as real NVML can behave after XID 79: not its
// identity, not its MIG devices, not even a handle lookup. It is still
// counted, the other GPUs are unaffected, and a reset brings it back, with
// its MIG mode but without its GPU and compute instances (which do not
// survive a GPU reset).
func TestLostGPUAnswersNothing(t *testing.T) {
	p, err := Parse([]byte(header + "gpus: [{model: h200-sxm-141gb, count: 2, devices: [{migEnabled: true, migDevices: [3g.71gb]}]}]\n"))
	require.NoError(t, err)
	s := NewServer(p, "n1")
	require.Equal(t, nvml.SUCCESS, s.Init())
	d, ret := s.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	other, _ := s.DeviceGetHandleByIndex(1)
	id, _ := d.GetUUID()
	serial, _ := d.GetSerial()
	migDev, ret := d.GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	migID, _ := migDev.GetUUID()
	gi, ret := d.GetGpuInstanceById(2)
	require.Equal(t, nvml.SUCCESS, ret)
	ci, ret := gi.GetComputeInstanceById(0)
	require.Equal(t, nvml.SUCCESS, ret)
	set, _ := s.EventSetCreate()

	require.NoError(t, s.SetLost(id, true))
	calls := map[string]func() nvml.Return{
		"GetUUID":                   func() nvml.Return { _, r := d.GetUUID(); return r },
		"GetName":                   func() nvml.Return { _, r := d.GetName(); return r },
		"GetMinorNumber":            func() nvml.Return { _, r := d.GetMinorNumber(); return r },
		"GetMemoryInfo":             func() nvml.Return { _, r := d.GetMemoryInfo(); return r },
		"GetPciInfo":                func() nvml.Return { _, r := d.GetPciInfo(); return r },
		"GetMigMode":                func() nvml.Return { _, _, r := d.GetMigMode(); return r },
		"GetMigDeviceHandleByIndex": func() nvml.Return { _, r := d.GetMigDeviceHandleByIndex(0); return r },
		"GetFieldValues":            func() nvml.Return { return d.GetFieldValues([]nvml.FieldValue{{}}) },
		"GetSupportedEventTypes":    func() nvml.Return { _, r := d.GetSupportedEventTypes(); return r },
		"RegisterEvents":            func() nvml.Return { return d.RegisterEvents(nvml.EventTypeXidCriticalError, set) },
		"GetFanSpeed (unmodelled)":  func() nvml.Return { _, r := d.GetFanSpeed(); return r },
		"DeviceGetName (forwarded)": func() nvml.Return { _, r := s.DeviceGetName(d); return r },
		"DeviceGetHandleByIndex":    func() nvml.Return { _, r := s.DeviceGetHandleByIndex(0); return r },
		"DeviceGetHandleByUUID":     func() nvml.Return { _, r := s.DeviceGetHandleByUUID(id); return r },
		"DeviceGetHandleByPciBusId": func() nvml.Return { _, r := s.DeviceGetHandleByPciBusId(p.GPUs[0].PCIBusID); return r },
		"DeviceGetHandleBySerial":   func() nvml.Return { _, r := s.DeviceGetHandleBySerial(serial); return r },
		"MIG device GetUUID":        func() nvml.Return { _, r := migDev.GetUUID(); return r },
		"MIG device by UUID":        func() nvml.Return { _, r := s.DeviceGetHandleByUUID(migID); return r },
		"GPU instance GetInfo":      func() nvml.Return { _, r := gi.GetInfo(); return r },
		"compute instance GetInfo":  func() nvml.Return { _, r := ci.GetInfo(); return r },
		"compute instance Destroy":  ci.Destroy,
	}
	for name, call := range calls {
		assert.Equal(t, nvml.ERROR_GPU_IS_LOST, call(), name)
	}
	n, ret := s.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, 2, n, "NVML still counts a lost GPU")
	_, ret = other.GetUUID()
	assert.Equal(t, nvml.SUCCESS, ret, "the other GPU answers")

	require.NoError(t, s.Reset(id))
	for name, call := range calls {
		want := nvml.SUCCESS
		switch name {
		case "GetFanSpeed (unmodelled)":
			want = nvml.ERROR_NOT_SUPPORTED
		case "GetMigDeviceHandleByIndex", "MIG device by UUID":
			want = nvml.ERROR_NOT_FOUND // the reset destroyed the MIG device
		case "MIG device GetUUID", "GPU instance GetInfo", "compute instance GetInfo", "compute instance Destroy":
			want = nvml.ERROR_INVALID_ARGUMENT // handles of destroyed instances
		}
		assert.Equal(t, want, call(), "after the reset: %s", name)
	}
	h, ret := s.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Same(t, d, h, "the same handle answers again")
}

// A lost GPU and its MIG devices still have a key (for the events that
// name them), without answering any call.
func TestKeyOfLostGPU(t *testing.T) {
	p, err := Parse([]byte(header + "gpus: [{model: h200-sxm-141gb, count: 2, devices: [{}, {migEnabled: true, migDevices: [3g.71gb]}]}]\n"))
	require.NoError(t, err)
	s := NewServer(p, "n1")
	require.Equal(t, nvml.SUCCESS, s.Init())
	d, _ := s.DeviceGetHandleByIndex(1)
	m, ret := d.GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	id, _ := d.GetUUID()
	require.NoError(t, s.SetLost(id, true))
	k, ok := KeyOf(d)
	assert.True(t, ok)
	assert.Equal(t, DeviceKey{GPU: 1}, k)
	k, ok = KeyOf(m)
	assert.True(t, ok)
	assert.Equal(t, DeviceKey{GPU: 1, MIG: true, GPUInstance: 2, ComputeInstance: 0}, k)
	_, ok = KeyOf(nil)
	assert.False(t, ok)
}

// TestResetRequiredAndUnbound: a GPU that needs a reset answers every call
// and lookup with ERROR_RESET_REQUIRED; an unbound one is not found by its
// UUID and its old handle answers ERROR_GPU_IS_LOST. A reset ends both.
func TestResetRequiredAndUnbound(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	d, _ := s.DeviceGetHandleByIndex(1)
	id, _ := d.GetUUID()
	for _, tc := range []struct {
		set         func(bool) error
		lookup      nvml.Return
		onOldHandle nvml.Return
	}{
		{func(on bool) error { return s.SetResetRequired(id, on) }, nvml.ERROR_RESET_REQUIRED, nvml.ERROR_RESET_REQUIRED},
		{func(on bool) error { return s.SetUnbound(id, on) }, nvml.ERROR_NOT_FOUND, nvml.ERROR_GPU_IS_LOST},
	} {
		require.NoError(t, tc.set(true))
		_, ret := s.DeviceGetHandleByUUID(id)
		assert.Equal(t, tc.lookup, ret)
		_, _, ret = d.GetMigMode()
		assert.Equal(t, tc.onOldHandle, ret)
		_, ret = d.GetGpuInstanceById(1)
		assert.Equal(t, tc.onOldHandle, ret)
		require.NoError(t, s.Reset(id))
		_, ret = s.DeviceGetHandleByUUID(id)
		assert.Equal(t, nvml.SUCCESS, ret)
	}
}

// TestECCCountersNeedECC: nvml.h, nvmlDeviceGetTotalEccErrors "requires ECC
// mode to be enabled": a GPU with ECC off (or without ECC) has no counters.
func TestECCCountersNeedECC(t *testing.T) {
	s := newServer(t, "mixed", "n1")
	for i, want := range []nvml.Return{nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED} { // the second L4 has ECC off
		d, _ := s.DeviceGetHandleByIndex(i)
		_, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		assert.Equal(t, want, ret, "GPU %d", i)
	}
}
