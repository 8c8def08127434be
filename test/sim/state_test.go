package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// TestPersistTo: a second server on the same state file (a restarted
// plugin) sees the MIG devices the first one created, with their UUIDs.
func TestPersistTo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	p, err := Load("dgx-h100", nil)
	require.NoError(t, err)

	a := NewServer(p, "node")
	require.NoError(t, a.PersistTo(path))
	require.Equal(t, nvml.SUCCESS, a.Init())
	dev, _ := a.DeviceGetHandleByIndex(2)
	ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	require.Equal(t, nvml.SUCCESS, ret)
	info, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	require.Equal(t, nvml.SUCCESS, ret)
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	_, ret = gi.CreateComputeInstance(&ciInfo)
	require.Equal(t, nvml.SUCCESS, ret)
	migA, _ := dev.GetMigDeviceHandleByIndex(0)
	uuidA, _ := migA.GetUUID()

	b := NewServer(p, "node")
	require.NoError(t, b.PersistTo(path))
	require.Equal(t, nvml.SUCCESS, b.Init())
	devB, _ := b.DeviceGetHandleByIndex(2)
	mode, _, _ := devB.GetMigMode()
	require.Equal(t, nvml.DEVICE_MIG_ENABLE, mode)
	migB, ret := devB.GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	uuidB, _ := migB.GetUUID()
	require.Equal(t, uuidA, uuidB)

	giB, ret := devB.GetGpuInstanceById(2)
	require.Equal(t, nvml.SUCCESS, ret)
	ciB, ret := giB.GetComputeInstanceById(0)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, nvml.SUCCESS, ciB.Destroy())
	require.Equal(t, nvml.SUCCESS, giB.Destroy())
	st, err := ReadState(path)
	require.NoError(t, err)
	require.True(t, st.GPUs[2].MIGEnabled)
	require.Empty(t, st.GPUs[2].GPUInstances)

	// A state file of another node is refused, not silently reused.
	c := NewServer(p, "other-node")
	require.ErrorContains(t, c.PersistTo(path), "remove the file")
	require.NoError(t, os.WriteFile(path, []byte("{"), 0o600))
	require.Error(t, NewServer(p, "node").PersistTo(path))
}

// TestComputeModePersisted: the compute mode a plugin sets is in the state
// file (tests read it there) and a restarted plugin finds it.
func TestComputeModePersisted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting the compute mode needs root, as with real NVML")
	}
	path := filepath.Join(t.TempDir(), "state.json")
	p, err := Load("dgx-h100", nil)
	require.NoError(t, err)
	a := NewServer(p, "node")
	require.NoError(t, a.PersistTo(path))
	require.Equal(t, nvml.SUCCESS, a.Init())
	dev, _ := a.DeviceGetHandleByIndex(1)
	require.Equal(t, nvml.SUCCESS, dev.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS))
	st, err := ReadState(path)
	require.NoError(t, err)
	require.Equal(t, int(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS), st.GPUs[1].ComputeMode)

	b := NewServer(p, "node")
	require.NoError(t, b.PersistTo(path))
	require.Equal(t, nvml.SUCCESS, b.Init())
	devB, _ := b.DeviceGetHandleByIndex(1)
	mode, ret := devB.GetComputeMode()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, mode)
}

// TestSetComputeModeAnswers: the simulator answers Set/GetComputeMode as
// nvml.h describes, never more kindly: EXCLUSIVE_THREAD is gone, a
// MIG-enabled GPU's own handle cannot set it, a lost GPU does not answer.
func TestSetComputeModeAnswers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting the compute mode needs root, as with real NVML")
	}
	for name, tc := range map[string]struct {
		mode     nvml.ComputeMode
		mig      bool
		lost     bool
		want     nvml.Return
		wantMode nvml.ComputeMode // GetComputeMode after
	}{
		"EXCLUSIVE_PROCESS": {mode: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, want: nvml.SUCCESS, wantMode: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS},
		"PROHIBITED":        {mode: nvml.COMPUTEMODE_PROHIBITED, want: nvml.SUCCESS, wantMode: nvml.COMPUTEMODE_PROHIBITED},
		"DEFAULT":           {mode: nvml.COMPUTEMODE_DEFAULT, want: nvml.SUCCESS},
		"EXCLUSIVE_THREAD":  {mode: nvml.COMPUTEMODE_EXCLUSIVE_THREAD, want: nvml.ERROR_NOT_SUPPORTED},
		"out of range":      {mode: nvml.COMPUTEMODE_COUNT, want: nvml.ERROR_INVALID_ARGUMENT},
		"MIG-enabled GPU":   {mode: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, mig: true, want: nvml.ERROR_NOT_SUPPORTED},
		"lost GPU":          {mode: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, lost: true, want: nvml.ERROR_GPU_IS_LOST},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Load("dgx-h100", nil)
			require.NoError(t, err)
			s := NewServer(p, "node")
			require.NoError(t, s.PersistTo(filepath.Join(t.TempDir(), "state.json")))
			require.Equal(t, nvml.SUCCESS, s.Init())
			dev, _ := s.DeviceGetHandleByIndex(0)
			if tc.mig {
				_, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
				require.Equal(t, nvml.SUCCESS, ret)
			}
			if tc.lost {
				uuid, _ := dev.GetUUID()
				require.NoError(t, s.SetLost(uuid, true))
			}
			require.Equal(t, tc.want, dev.SetComputeMode(tc.mode))
			if tc.lost {
				return
			}
			mode, ret := dev.GetComputeMode()
			require.Equal(t, nvml.SUCCESS, ret)
			require.Equal(t, tc.wantMode, mode)
		})
	}
}
