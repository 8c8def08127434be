package sim

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentCreateOnOneGPU races many creators for the seven 1g slots
// of one GPU: exactly seven must win, on distinct placements.
func TestConcurrentCreateOnOneGPU(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	d := migGPU(t, s, 0)
	oneG := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)

	var wg sync.WaitGroup
	results := make([]nvml.Return, 20)
	instances := make([]nvml.GpuInstance, 20)
	for i := range results {
		wg.Go(func() { instances[i], results[i] = d.CreateGpuInstance(&oneG) })
	}
	wg.Wait()
	starts := map[uint32]bool{}
	for i, ret := range results {
		if ret == nvml.SUCCESS {
			info, _ := instances[i].GetInfo()
			assert.False(t, starts[info.Placement.Start], "placement %d handed out twice", info.Placement.Start)
			starts[info.Placement.Start] = true
		} else {
			assert.Equal(t, nvml.ERROR_INSUFFICIENT_RESOURCES, ret)
		}
	}
	assert.Len(t, starts, 7)
}

// TestConcurrentMIGChurn creates and destroys GPU and compute instances on
// all GPUs from many goroutines while others read; run it with -race.
func TestConcurrentMIGChurn(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	n, _ := s.DeviceGetCount()
	devices := make([]nvml.Device, n)
	for i := range devices {
		devices[i] = migGPU(t, s, i)
	}
	profiles := []int{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE,
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, nvml.GPU_INSTANCE_PROFILE_4_SLICE,
	}
	fullCI := map[int]int{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
		nvml.GPU_INSTANCE_PROFILE_2_SLICE: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
		nvml.GPU_INSTANCE_PROFILE_4_SLICE: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	}
	const workersPerGPU, rounds = 3, 30
	var created atomic.Int64
	var stop atomic.Bool
	var wg, readers sync.WaitGroup

	for range 2 {
		readers.Go(func() {
			for !stop.Load() {
				for _, d := range devices {
					_, _, _ = d.GetMigMode()
					for i := 0; ; i++ {
						mig, ret := d.GetMigDeviceHandleByIndex(i)
						if ret != nvml.SUCCESS {
							break
						}
						if id, ret := mig.GetUUID(); ret == nvml.SUCCESS {
							_, _ = s.DeviceGetHandleByUUID(id)
						}
						_, _ = mig.GetMemoryInfo()
					}
				}
			}
		})
	}
	for gpu, d := range devices {
		for w := range workersPerGPU {
			wg.Go(func() {
				for r := range rounds {
					profile := profiles[(gpu+w+r)%len(profiles)]
					info, ret := d.GetGpuInstanceProfileInfo(profile)
					if !assert.Equal(t, nvml.SUCCESS, ret) {
						return
					}
					gi, ret := d.CreateGpuInstance(&info)
					if ret == nvml.ERROR_INSUFFICIENT_RESOURCES {
						continue
					}
					if !assert.Equal(t, nvml.SUCCESS, ret) {
						return
					}
					created.Add(1)
					ciInfo, ret := gi.GetComputeInstanceProfileInfo(fullCI[profile], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
					assert.Equal(t, nvml.SUCCESS, ret)
					ci, ret := gi.CreateComputeInstance(&ciInfo)
					assert.Equal(t, nvml.SUCCESS, ret)
					giInfo, _ := gi.GetInfo()
					got, ret := d.GetGpuInstanceById(int(giInfo.Id))
					assert.Equal(t, nvml.SUCCESS, ret)
					assert.Same(t, gi, got)
					assert.Equal(t, nvml.SUCCESS, ci.Destroy())
					assert.Equal(t, nvml.SUCCESS, gi.Destroy())
				}
			})
		}
	}
	wg.Wait()
	stop.Store(true)
	readers.Wait()

	assert.Positive(t, created.Load())
	for _, d := range devices {
		oneG := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
		left, ret := d.GetGpuInstanceRemainingCapacity(&oneG)
		require.Equal(t, nvml.SUCCESS, ret)
		assert.Equal(t, 7, left, "every instance was destroyed")
		_, ret = d.GetMigDeviceHandleByIndex(0)
		assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)
	}
}
