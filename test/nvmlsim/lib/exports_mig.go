package main

import "C"

import "unsafe"

// MIG: on GPU and MIG device handles, GPU instances, compute instances.

//export nvmlDeviceGetEccMode
func nvmlDeviceGetEccMode(d uintptr, current, pending unsafe.Pointer) int32 {
	return r(lib.DeviceGetEccMode(d, current, pending))
}

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(d uintptr, current, pending unsafe.Pointer) int32 {
	return r(lib.DeviceGetMigMode(d, current, pending))
}

//export nvmlDeviceSetMigMode
func nvmlDeviceSetMigMode(d uintptr, mode uint32, activation unsafe.Pointer) int32 {
	return r(lib.DeviceSetMigMode(d, mode, activation))
}

//export nvmlDeviceGetMaxMigDeviceCount
func nvmlDeviceGetMaxMigDeviceCount(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetMaxMigDeviceCount(d, p))
}

//export nvmlDeviceGetMigDeviceHandleByIndex
func nvmlDeviceGetMigDeviceHandleByIndex(d uintptr, i uint32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetMigDeviceHandleByIndex(d, i, p))
}

//export nvmlDeviceIsMigDeviceHandle
func nvmlDeviceIsMigDeviceHandle(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceIsMigDeviceHandle(d, p))
}

//export nvmlDeviceGetDeviceHandleFromMigDeviceHandle
func nvmlDeviceGetDeviceHandleFromMigDeviceHandle(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetDeviceHandleFromMigDeviceHandle(d, p))
}

//export nvmlDeviceGetGpuInstanceId
func nvmlDeviceGetGpuInstanceId(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstanceId(d, p))
}

//export nvmlDeviceGetComputeInstanceId
func nvmlDeviceGetComputeInstanceId(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetComputeInstanceId(d, p))
}

//export nvmlDeviceGetGpuInstanceProfileInfo
func nvmlDeviceGetGpuInstanceProfileInfo(d uintptr, profile uint32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstanceProfileInfo(d, profile, p))
}

//export nvmlDeviceGetGpuInstanceProfileInfoV
func nvmlDeviceGetGpuInstanceProfileInfoV(d uintptr, profile uint32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstanceProfileInfoV(d, profile, p))
}

//export nvmlDeviceGetGpuInstanceProfileInfoByIdV
func nvmlDeviceGetGpuInstanceProfileInfoByIdV(d uintptr, id uint32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstanceProfileInfoByIdV(d, id, p))
}

//export nvmlDeviceGetGpuInstancePossiblePlacements
func nvmlDeviceGetGpuInstancePossiblePlacements(d uintptr, id uint32, pl, n unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstancePossiblePlacements("nvmlDeviceGetGpuInstancePossiblePlacements", d, id, pl, n))
}

//export nvmlDeviceGetGpuInstancePossiblePlacements_v2
func nvmlDeviceGetGpuInstancePossiblePlacements_v2(d uintptr, id uint32, pl, n unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstancePossiblePlacements("nvmlDeviceGetGpuInstancePossiblePlacements_v2", d, id, pl, n))
}

//export nvmlDeviceGetGpuInstanceRemainingCapacity
func nvmlDeviceGetGpuInstanceRemainingCapacity(d uintptr, id uint32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstanceRemainingCapacity(d, id, p))
}

//export nvmlDeviceCreateGpuInstance
func nvmlDeviceCreateGpuInstance(d uintptr, id uint32, p unsafe.Pointer) int32 {
	return r(lib.DeviceCreateGpuInstance(d, id, p))
}

//export nvmlDeviceCreateGpuInstanceWithPlacement
func nvmlDeviceCreateGpuInstanceWithPlacement(d uintptr, id uint32, pl, p unsafe.Pointer) int32 {
	return r(lib.DeviceCreateGpuInstanceWithPlacement(d, id, pl, p))
}

//export nvmlDeviceGetGpuInstances
func nvmlDeviceGetGpuInstances(d uintptr, id uint32, gis, n unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstances(d, id, gis, n))
}

//export nvmlDeviceGetGpuInstanceById
func nvmlDeviceGetGpuInstanceById(d uintptr, id uint32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuInstanceById(d, id, p))
}

//export nvmlGpuInstanceGetInfo
func nvmlGpuInstanceGetInfo(gi uintptr, p unsafe.Pointer) int32 {
	return r(lib.GpuInstanceGetInfo(gi, p))
}

//export nvmlGpuInstanceDestroy
func nvmlGpuInstanceDestroy(gi uintptr) int32 { return r(lib.GpuInstanceDestroy(gi)) }

//export nvmlGpuInstanceGetComputeInstanceProfileInfo
func nvmlGpuInstanceGetComputeInstanceProfileInfo(gi uintptr, profile, eng uint32, p unsafe.Pointer) int32 {
	return r(lib.GpuInstanceGetComputeInstanceProfileInfo(gi, profile, eng, p))
}

//export nvmlGpuInstanceGetComputeInstanceProfileInfoV
func nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi uintptr, profile, eng uint32, p unsafe.Pointer) int32 {
	return r(lib.GpuInstanceGetComputeInstanceProfileInfoV(gi, profile, eng, p))
}

//export nvmlGpuInstanceGetComputeInstancePossiblePlacements
func nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi uintptr, id uint32, pl, n unsafe.Pointer) int32 {
	return r(lib.GpuInstanceGetComputeInstancePossiblePlacements(gi, id, pl, n))
}

//export nvmlGpuInstanceGetComputeInstanceRemainingCapacity
func nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi uintptr, id uint32, p unsafe.Pointer) int32 {
	return r(lib.GpuInstanceGetComputeInstanceRemainingCapacity(gi, id, p))
}

//export nvmlGpuInstanceCreateComputeInstance
func nvmlGpuInstanceCreateComputeInstance(gi uintptr, id uint32, p unsafe.Pointer) int32 {
	return r(lib.GpuInstanceCreateComputeInstance(gi, id, p))
}

//export nvmlGpuInstanceCreateComputeInstanceWithPlacement
func nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi uintptr, id uint32, pl, p unsafe.Pointer) int32 {
	return r(lib.GpuInstanceCreateComputeInstanceWithPlacement(gi, id, pl, p))
}

//export nvmlGpuInstanceGetComputeInstances
func nvmlGpuInstanceGetComputeInstances(gi uintptr, id uint32, cis, n unsafe.Pointer) int32 {
	return r(lib.GpuInstanceGetComputeInstances(gi, id, cis, n))
}

//export nvmlGpuInstanceGetComputeInstanceById
func nvmlGpuInstanceGetComputeInstanceById(gi uintptr, id uint32, p unsafe.Pointer) int32 {
	return r(lib.GpuInstanceGetComputeInstanceById(gi, id, p))
}

//export nvmlComputeInstanceGetInfo
func nvmlComputeInstanceGetInfo(ci uintptr, p unsafe.Pointer) int32 {
	return r(lib.ComputeInstanceGetInfo("nvmlComputeInstanceGetInfo", ci, p))
}

//export nvmlComputeInstanceGetInfo_v2
func nvmlComputeInstanceGetInfo_v2(ci uintptr, p unsafe.Pointer) int32 {
	return r(lib.ComputeInstanceGetInfo("nvmlComputeInstanceGetInfo_v2", ci, p))
}

//export nvmlComputeInstanceDestroy
func nvmlComputeInstanceDestroy(ci uintptr) int32 { return r(lib.ComputeInstanceDestroy(ci)) }
