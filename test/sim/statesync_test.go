package sim

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// twoProcesses returns two servers of one node sharing a state file, as
// two processes (a running plugin and nvidia-smi, or the two plugins of a
// rolling update) each have their own.
func twoProcesses(t *testing.T) (a, b *Server, path string) {
	path = filepath.Join(t.TempDir(), "state.json")
	p, err := Load("dgx-h100", nil)
	require.NoError(t, err)
	a, b = NewServer(p, "node"), NewServer(p, "node")
	for _, s := range []*Server{a, b} {
		require.NoError(t, s.PersistTo(path))
		require.Equal(t, nvml.SUCCESS, s.Init())
	}
	return a, b, path
}

// partition enables MIG mode on GPU gpu of s and creates one GPU instance
// of profile at start with its full compute instance.
func partition(t *testing.T, s *Server, gpu, profile int, start uint32) (nvml.GpuInstance, nvml.ComputeInstance) {
	t.Helper()
	dev, ret := s.DeviceGetHandleByIndex(gpu)
	require.Equal(t, nvml.SUCCESS, ret)
	if mode, _, _ := dev.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
		_, ret = dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
		require.Equal(t, nvml.SUCCESS, ret)
	}
	info, ret := dev.GetGpuInstanceProfileInfo(profile)
	require.Equal(t, nvml.SUCCESS, ret)
	placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
	require.Equal(t, nvml.SUCCESS, ret)
	pl := nvml.GpuInstancePlacement{Start: start}
	for _, p := range placements {
		if p.Start == start {
			pl = p
		}
	}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl)
	require.Equal(t, nvml.SUCCESS, ret, "GPU instance profile %d at %d on GPU %d", profile, start, gpu)
	giInfo, _ := gi.GetInfo()
	ciProfile := map[int]int{nvml.GPU_INSTANCE_PROFILE_1_SLICE: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
		nvml.GPU_INSTANCE_PROFILE_7_SLICE: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE}[profile]
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	require.Equal(t, nvml.SUCCESS, ret)
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	require.Equal(t, nvml.SUCCESS, ret, "compute instance in GPU instance %d", giInfo.Id)
	return gi, ci
}

// TestStateSharedBetweenProcesses: as on a real GPU, whose MIG state is
// the driver's, a running process sees what another one changed, cannot
// create an instance where the other one has, does not write back what
// the other one changed, and keeps working handles to what did not change;
// handles to what the other destroyed answer as destroyed.
func TestStateSharedBetweenProcesses(t *testing.T) {
	plugin, smi, path := twoProcesses(t)
	devP, _ := plugin.DeviceGetHandleByIndex(0)
	mode, _, _ := devP.GetMigMode()
	require.Equal(t, nvml.DEVICE_MIG_DISABLE, mode)

	// nvidia-smi partitions GPU 0 while the plugin runs.
	giS, ciS := partition(t, smi, 0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4)
	mode, _, ret := devP.GetMigMode()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, nvml.DEVICE_MIG_ENABLE, mode, "the running process sees the MIG mode another one set")
	migP, ret := devP.GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret, "and its MIG device")
	devS, _ := smi.DeviceGetHandleByIndex(0)
	migS, _ := devS.GetMigDeviceHandleByIndex(0)
	uuidS, _ := migS.GetUUID()
	uuidP, _ := migP.GetUUID()
	require.Equal(t, uuidS, uuidP)

	// The plugin cannot create a GPU instance where nvidia-smi has one...
	info, _ := devP.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	_, ret = devP.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	require.Equal(t, nvml.ERROR_INSUFFICIENT_RESOURCES, ret)
	// ...and what it does create is written beside nvidia-smi's instance,
	// not over it.
	giP, _ := partition(t, plugin, 0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0)
	partition(t, plugin, 3, nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0)
	st, err := ReadState(path)
	require.NoError(t, err)
	require.Len(t, st.GPUs[0].GPUInstances, 2)
	require.Len(t, st.GPUs[3].GPUInstances, 1)
	// nvidia-smi, in turn, sees the plugin's instances.
	devS3, _ := smi.DeviceGetHandleByIndex(3)
	n, ret := devS3.GetMaxMigDeviceCount()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Positive(t, n)
	_, ret = devS3.GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)

	// nvidia-smi destroys its instance: the plugin's handles to it answer
	// as for a destroyed instance, its handles to its own still work.
	require.Equal(t, nvml.SUCCESS, ciS.Destroy())
	require.Equal(t, nvml.SUCCESS, giS.Destroy())
	_, ret = migP.GetUUID()
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
	_, ret = giP.GetInfo()
	require.Equal(t, nvml.SUCCESS, ret, "an unchanged instance keeps its handle")
	count, ret := devP.GetGpuInstances(&info)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Empty(t, count, "no 3-slice GPU instance left")
}

// TestConcurrentChangesAreNotLost: two processes changing different GPUs
// at the same time both find their changes in the file, and each sees the
// other's.
func TestConcurrentChangesAreNotLost(t *testing.T) {
	a, b, path := twoProcesses(t)
	var wg sync.WaitGroup
	for i, s := range []*Server{a, b} {
		wg.Go(func() {
			for gpu := i * 4; gpu < i*4+4; gpu++ {
				for _, start := range []uint32{0, 1, 2, 3} {
					partition(t, s, gpu, nvml.GPU_INSTANCE_PROFILE_1_SLICE, start)
				}
			}
		})
	}
	wg.Wait()
	st, err := ReadState(path)
	require.NoError(t, err)
	for gpu, g := range st.GPUs {
		require.True(t, g.MIGEnabled, "GPU %d", gpu)
		require.Len(t, g.GPUInstances, 4, "GPU %d", gpu)
	}
	for _, s := range []*Server{a, b} {
		for gpu := range 8 {
			dev, _ := s.DeviceGetHandleByIndex(gpu)
			_, ret := dev.GetMigDeviceHandleByIndex(3)
			require.Equal(t, nvml.SUCCESS, ret, "GPU %d", gpu)
		}
	}
}
