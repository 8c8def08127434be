package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func recoveryOf(t *testing.T, d nvml.Device) nvml.DeviceGpuRecoveryAction {
	t.Helper()
	v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	require.Equal(t, nvml.SUCCESS, d.GetFieldValues(v))
	require.Equal(t, uint32(nvml.SUCCESS), v[0].NvmlReturn)
	return nvml.DeviceGpuRecoveryAction(v[0].Value[0])
}

func TestFaultInjection(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inject   func(s *Server, id string) error
		event    uint64 // expected event type, 0: none
		data     uint64
		lost     bool
		recovery nvml.DeviceGpuRecoveryAction
		dbe      uint64
	}{
		{name: "xid 79", inject: func(s *Server, id string) error { return s.InjectXID(id, 79) },
			event: nvml.EventTypeXidCriticalError, data: 79, lost: true, recovery: nvml.GPU_RECOVERY_ACTION_NODE_REBOOT},
		{name: "xid 48", inject: func(s *Server, id string) error { return s.InjectXID(id, 48) },
			event: nvml.EventTypeXidCriticalError, data: 48, recovery: nvml.GPU_RECOVERY_ACTION_GPU_RESET, dbe: 1},
		{name: "application xid 13", inject: func(s *Server, id string) error { return s.InjectXID(id, 13) },
			event: nvml.EventTypeXidCriticalError, data: 13},
		{name: "double-bit ECC", inject: func(s *Server, id string) error { return s.InjectDoubleBitECC(id) },
			event: nvml.EventTypeDoubleBitEccError, recovery: nvml.GPU_RECOVERY_ACTION_NONE, dbe: 1},
		{name: "silently lost", inject: func(s *Server, id string) error { return s.SetLost(id, true) }, lost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, "dgx-h100", "node-a")
			set, ret := s.EventSetCreate()
			require.Equal(t, nvml.SUCCESS, ret)
			defer func() { assert.Equal(t, nvml.SUCCESS, set.Free()) }()
			d, _ := s.DeviceGetHandleByIndex(2)
			other, _ := s.DeviceGetHandleByIndex(3)
			types, ret := d.GetSupportedEventTypes()
			require.Equal(t, nvml.SUCCESS, ret)
			require.Equal(t, nvml.SUCCESS, s.DeviceRegisterEvents(d, types, set))
			require.Equal(t, nvml.SUCCESS, other.RegisterEvents(types, set))
			id, _ := d.GetUUID()

			require.NoError(t, tc.inject(s, id))
			ev, ret := s.EventSetWait(set, 50)
			if tc.event == 0 {
				assert.Equal(t, nvml.ERROR_TIMEOUT, ret)
			} else {
				require.Equal(t, nvml.SUCCESS, ret)
				assert.Equal(t, tc.event, ev.EventType)
				assert.Equal(t, tc.data, ev.EventData)
				assert.Same(t, d, ev.Device)
				_, ret = set.Wait(10)
				assert.Equal(t, nvml.ERROR_TIMEOUT, ret, "one event only, none for the other GPU")
			}
			_, ret = d.GetMemoryInfo()
			if tc.lost {
				assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
				assert.Equal(t, nvml.ERROR_GPU_IS_LOST, d.GetFieldValues([]nvml.FieldValue{{}}))
			} else {
				assert.Equal(t, nvml.SUCCESS, ret)
				assert.Equal(t, tc.recovery, recoveryOf(t, d))
			}
			if !tc.lost {
				n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
				require.Equal(t, nvml.SUCCESS, ret)
				assert.Equal(t, tc.dbe, n)
			}
			got, ret := d.GetUUID()
			if tc.lost {
				assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret, "a lost GPU does not even tell its UUID")
			} else {
				assert.Equal(t, nvml.SUCCESS, ret)
				assert.Equal(t, id, got)
			}
			_, ret = other.GetMemoryInfo()
			assert.Equal(t, nvml.SUCCESS, ret, "other GPUs are unaffected")

			require.NoError(t, s.Reset(id))
			_, ret = d.GetMemoryInfo()
			assert.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, nvml.GPU_RECOVERY_ACTION_NONE, recoveryOf(t, d))
			n, _ := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			assert.Zero(t, n, "a reset zeroes the volatile counter")
			agg, _ := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
			assert.Equal(t, tc.dbe, agg, "aggregate counters persist")
		})
	}
}

func TestEventSetErrors(t *testing.T) {
	s := newServer(t, "l4", "node-a")
	d, _ := s.DeviceGetHandleByIndex(0)
	set, _ := s.EventSetCreate()
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, d.RegisterEvents(nvml.EventTypePState, set), "unsupported type")
	require.Equal(t, nvml.SUCCESS, set.Free())
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, set.Free(), "double free")
	_, ret := set.Wait(1)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
	assert.Error(t, s.InjectXID("GPU-nope", 79))
}

func TestParseFaults(t *testing.T) {
	got, err := ParseFaults("# broken GPUs\ngpu-3 xid 79  # fell off\n\ngpu-1 ecc\nGPU-x lost\n")
	require.NoError(t, err)
	assert.Equal(t, []Fault{{GPU: "gpu-3", Kind: "xid", XID: 79}, {GPU: "gpu-1", Kind: "ecc"}, {GPU: "GPU-x", Kind: "lost"}}, got)
	got, err = ParseFaults("gpu-0 xid 94 gi 3\ngpu-0 xid 13 gi 5 ci 0\n")
	require.NoError(t, err)
	assert.Equal(t, []Fault{{GPU: "gpu-0", Kind: "xid", XID: 94, MIG: &XIDScope{GI: 3, CI: 0xFFFFFFFF}},
		{GPU: "gpu-0", Kind: "xid", XID: 13, MIG: &XIDScope{GI: 5, CI: 0}}}, got)
	assert.Equal(t, "gpu-0 xid 13 gi 5 ci 0", got[1].String())
	for _, bad := range []string{"gpu-1 xid", "gpu-1 xid seventy", "gpu-1 xid 0", "gpu-1 melted", "gpu-1 ecc extra",
		"gpu-1 xid 94 gi", "gpu-1 xid 94 ci 0", "gpu-1 xid 94 gi x", "gpu-1 xid 94 gi 1 gi 2"} {
		_, err := ParseFaults(bad)
		assert.Error(t, err, bad)
	}
}

func TestFaultFileSync(t *testing.T) {
	s := newServer(t, "dgx-h100", "node-a")
	path := filepath.Join(t.TempDir(), "faults")
	ff := NewFaultFile(path, s)
	require.NoError(t, ff.Sync(), "a missing file is no fault")
	gpu3, _ := s.DeviceGetHandleByIndex(3)
	gpu1, _ := s.DeviceGetHandleByIndex(1)
	id1, _ := gpu1.GetUUID()
	set, _ := s.EventSetCreate()
	require.Equal(t, nvml.SUCCESS, gpu3.RegisterEvents(nvml.EventTypeXidCriticalError, set))

	require.NoError(t, os.WriteFile(path, []byte("gpu-3 xid 79\n"+id1+" lost\n"), 0o600))
	require.NoError(t, ff.Sync())
	require.NoError(t, ff.Sync(), "a line is injected once")
	ev, ret := set.Wait(10)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, uint64(79), ev.EventData)
	_, ret = set.Wait(10)
	assert.Equal(t, nvml.ERROR_TIMEOUT, ret)
	_, ret = gpu1.GetMemoryInfo()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)

	require.NoError(t, os.WriteFile(path, []byte(id1+" lost\n"), 0o600))
	require.NoError(t, ff.Sync())
	_, ret = gpu3.GetMemoryInfo()
	assert.Equal(t, nvml.SUCCESS, ret, "gpu-3 is reset once its line is gone")
	_, ret = gpu1.GetMemoryInfo()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)

	require.NoError(t, os.WriteFile(path, []byte("gpu-9 xid 79\n"), 0o600))
	assert.ErrorContains(t, ff.Sync(), "gpu-9")
	require.NoError(t, os.Remove(path))
	require.NoError(t, ff.Sync())
	_, ret = gpu1.GetMemoryInfo()
	assert.Equal(t, nvml.SUCCESS, ret, "no file: every GPU repaired")
}

// Drivers before R550 do not report the recovery action; the ECC counters
// and events work as on newer drivers.
func TestRecoveryActionNeedsR550(t *testing.T) {
	for _, tc := range []struct {
		driver string
		want   nvml.Return
	}{
		{driver: "535.183.01", want: nvml.ERROR_NOT_SUPPORTED},
		{driver: "550.90.07", want: nvml.SUCCESS},
		{driver: "570.124.06", want: nvml.SUCCESS},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			p, err := Parse([]byte("name: old\ndriverVersion: \"" + tc.driver + "\"\ncudaDriverVersion: \"12.2\"\ngpus:\n  - model: h100-sxm5-80gb\n"))
			require.NoError(t, err)
			s := NewServer(p, "node-a")
			require.Equal(t, nvml.SUCCESS, s.Init())
			t.Cleanup(func() { _ = s.Shutdown() })
			d, _ := s.DeviceGetHandleByIndex(0)
			id, _ := d.GetUUID()
			require.NoError(t, s.InjectDoubleBitECC(id))
			v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
			require.Equal(t, nvml.SUCCESS, d.GetFieldValues(v))
			assert.Equal(t, tc.want, nvml.Return(v[0].NvmlReturn))
			n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, uint64(1), n)
		})
	}
}

// TestMIGScopedXID: an XID of a GPU instance carries its GPU and compute
// instance IDs in the event, as NVML's does; a GPU-wide one 0xFFFFFFFF.
func TestMIGScopedXID(t *testing.T) {
	s := newServer(t, "dgx-h100", "node-a")
	d := migGPU(t, s, 0)
	id, _ := d.GetUUID()
	info := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	gi, ret := d.CreateGpuInstance(&info)
	require.Equal(t, nvml.SUCCESS, ret)
	giInfo, _ := gi.GetInfo()
	set, _ := s.EventSetCreate()
	require.Equal(t, nvml.SUCCESS, d.RegisterEvents(nvml.EventTypeXidCriticalError, set))

	require.NoError(t, s.InjectMIGXID(id, 94, giInfo.Id, 0xFFFFFFFF))
	ev, ret := set.Wait(10)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, []uint32{giInfo.Id, 0xFFFFFFFF}, []uint32{ev.GpuInstanceId, ev.ComputeInstanceId})
	require.NoError(t, s.InjectXID(id, 62))
	ev, _ = set.Wait(10)
	assert.Equal(t, []uint32{0xFFFFFFFF, 0xFFFFFFFF}, []uint32{ev.GpuInstanceId, ev.ComputeInstanceId})
	require.Error(t, s.InjectMIGXID(id, 94, giInfo.Id+1, 0xFFFFFFFF), "no such GPU instance")
	require.Error(t, s.InjectMIGXID(id, 94, giInfo.Id, 7), "no such compute instance")
}
