package nvmlsim

import (
	"testing"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

func ok(t *testing.T, ret nvml.Return) {
	t.Helper()
	require.Equal(t, nvml.SUCCESS, ret)
}

func TestMIGLifecycle(t *testing.T) {
	f := newFixture(t, "dgx-h100")
	f.init()
	l := f.l
	gpu := f.gpu(0)
	var activation nvml.Return
	ok(t, l.DeviceSetMigMode(gpu, nvml.DEVICE_MIG_ENABLE, unsafe.Pointer(&activation)))
	ok(t, activation)
	var cur, pending uint32
	ok(t, l.DeviceGetMigMode(gpu, unsafe.Pointer(&cur), unsafe.Pointer(&pending)))
	require.EqualValues(t, nvml.DEVICE_MIG_ENABLE, cur)

	// 3g.40gb: profile index 2, unique ID 9 on H100.
	var info nvml.GpuInstanceProfileInfo
	ok(t, l.DeviceGetGpuInstanceProfileInfo(gpu, nvml.GPU_INSTANCE_PROFILE_3_SLICE, unsafe.Pointer(&info)))
	require.EqualValues(t, 9, info.Id)

	var v3 nvml.GpuInstanceProfileInfo_v3
	require.Equal(t, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, l.DeviceGetGpuInstanceProfileInfoV(gpu, nvml.GPU_INSTANCE_PROFILE_3_SLICE, unsafe.Pointer(&v3)))
	v3.Version = nvml.STRUCT_VERSION(v3, 3)
	ok(t, l.DeviceGetGpuInstanceProfileInfoV(gpu, nvml.GPU_INSTANCE_PROFILE_3_SLICE, unsafe.Pointer(&v3)))
	require.Equal(t, "MIG 3g.40gb", cString(v3.Name[:]))
	require.Equal(t, info.MemorySizeMB, v3.MemorySizeMB)
	var v2 nvml.GpuInstanceProfileInfo_v2
	v2.Version = nvml.STRUCT_VERSION(v2, 2)
	ok(t, l.DeviceGetGpuInstanceProfileInfoByIdV(gpu, 9, unsafe.Pointer(&v2)))
	require.Equal(t, "MIG 3g.40gb", cString(v2.Name[:]))
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, l.DeviceGetGpuInstanceProfileInfoByIdV(gpu, 1234, unsafe.Pointer(&v2)))

	var n uint32
	ok(t, l.DeviceGetGpuInstancePossiblePlacements("test", gpu, info.Id, nil, unsafe.Pointer(&n)))
	placements := make([]nvml.GpuInstancePlacement, n)
	ok(t, l.DeviceGetGpuInstancePossiblePlacements("test", gpu, info.Id, unsafe.Pointer(&placements[0]), unsafe.Pointer(&n)))
	require.Equal(t, []nvml.GpuInstancePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}, placements)

	var gi uintptr
	ok(t, l.DeviceCreateGpuInstanceWithPlacement(gpu, info.Id, unsafe.Pointer(&placements[1]), unsafe.Pointer(&gi)))
	require.Equal(t, nvml.ERROR_INSUFFICIENT_RESOURCES,
		l.DeviceCreateGpuInstanceWithPlacement(gpu, info.Id, unsafe.Pointer(&placements[1]), unsafe.Pointer(&gi)), "occupied")
	var giInfo cGpuInstanceInfo
	ok(t, l.GpuInstanceGetInfo(gi, unsafe.Pointer(&giInfo)))
	require.Equal(t, cGpuInstanceInfo{Device: gpu, Id: 2, ProfileId: 9, Placement: placements[1]}, giInfo)
	var remaining uint32
	ok(t, l.DeviceGetGpuInstanceRemainingCapacity(gpu, info.Id, unsafe.Pointer(&remaining)))
	require.EqualValues(t, 1, remaining)

	var ciInfo nvml.ComputeInstanceProfileInfo
	ok(t, l.GpuInstanceGetComputeInstanceProfileInfo(gi, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, unsafe.Pointer(&ciInfo)))
	var civ nvml.ComputeInstanceProfileInfo_v2
	civ.Version = nvml.STRUCT_VERSION(civ, 2)
	ok(t, l.GpuInstanceGetComputeInstanceProfileInfoV(gi, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, unsafe.Pointer(&civ)))
	require.Equal(t, "MIG 1c.3g.40gb", cString(civ.Name[:]))
	require.Equal(t, ciInfo.MultiprocessorCount, civ.MultiprocessorCount)
	var ci uintptr
	ok(t, l.GpuInstanceCreateComputeInstance(gi, ciInfo.Id, unsafe.Pointer(&ci)))
	var ciI cComputeInstanceInfo
	ok(t, l.ComputeInstanceGetInfo("test", ci, unsafe.Pointer(&ciI)))
	require.Equal(t, gpu, ciI.Device)
	require.Equal(t, gi, ciI.GpuInstance)

	var cis [4]uintptr
	n = 4
	ok(t, l.GpuInstanceGetComputeInstances(gi, ciInfo.Id, unsafe.Pointer(&cis[0]), unsafe.Pointer(&n)))
	require.Equal(t, []uintptr{ci}, cis[:n])

	var mig uintptr
	ok(t, l.DeviceGetMigDeviceHandleByIndex(gpu, 0, unsafe.Pointer(&mig)))
	var isMIG, giID, ciID uint32
	ok(t, l.DeviceIsMigDeviceHandle(mig, unsafe.Pointer(&isMIG)))
	require.EqualValues(t, 1, isMIG)
	ok(t, l.DeviceGetGpuInstanceId(mig, unsafe.Pointer(&giID)))
	ok(t, l.DeviceGetComputeInstanceId(mig, unsafe.Pointer(&ciID)))
	require.Equal(t, [2]uint32{2, ciI.Id}, [2]uint32{giID, ciID})
	var parent uintptr
	ok(t, l.DeviceGetDeviceHandleFromMigDeviceHandle(mig, unsafe.Pointer(&parent)))
	require.Equal(t, gpu, parent)
	var attrs nvml.DeviceAttributes
	ok(t, l.DeviceGetAttributes("test", mig, unsafe.Pointer(&attrs)))
	require.EqualValues(t, 3, attrs.GpuInstanceSliceCount)
	migUUID := f.uuid(mig)
	require.Regexp(t, "^MIG-", migUUID)

	// The MIG state outlives the session; handles keep naming the same objects.
	ok(t, l.Shutdown())
	ok(t, l.Init())
	require.Equal(t, migUUID, f.uuid(mig))
	var gis [4]uintptr
	n = 4
	ok(t, l.DeviceGetGpuInstances(gpu, info.Id, unsafe.Pointer(&gis[0]), unsafe.Pointer(&n)))
	require.Equal(t, []uintptr{gi}, gis[:n])
	var byID uintptr
	ok(t, l.DeviceGetGpuInstanceById(gpu, 2, unsafe.Pointer(&byID)))
	require.Equal(t, gi, byID)

	require.Equal(t, nvml.ERROR_IN_USE, l.GpuInstanceDestroy(gi), "compute instances first")
	ok(t, l.ComputeInstanceDestroy(ci))
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, l.ComputeInstanceDestroy(ci), "gone")
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, l.DeviceGetUUID(mig, unsafe.Pointer(&n), 4), "its MIG device is gone too")
	ok(t, l.GpuInstanceDestroy(gi))
	require.Equal(t, nvml.ERROR_NOT_FOUND, l.DeviceGetGpuInstanceById(gpu, 2, unsafe.Pointer(&byID)))
}

func TestMIGOnL4IsNotSupported(t *testing.T) {
	f := newFixture(t, "l4")
	f.init()
	gpu := f.gpu(0)
	var cur, pending, n uint32
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, f.l.DeviceGetMigMode(gpu, unsafe.Pointer(&cur), unsafe.Pointer(&pending)))
	var info nvml.GpuInstanceProfileInfo
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, f.l.DeviceGetGpuInstanceProfileInfo(gpu, 0, unsafe.Pointer(&info)))
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, f.l.DeviceGetGpuInstancePossiblePlacements("test", gpu, 19, nil, unsafe.Pointer(&n)))
	var v2 nvml.GpuInstanceProfileInfo_v2
	v2.Version = nvml.STRUCT_VERSION(v2, 2)
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, f.l.DeviceGetGpuInstanceProfileInfoByIdV(gpu, 19, unsafe.Pointer(&v2)))
	var isMIG uint32 = 7
	ok(t, f.l.DeviceIsMigDeviceHandle(gpu, unsafe.Pointer(&isMIG)))
	require.Zero(t, isMIG)
}
