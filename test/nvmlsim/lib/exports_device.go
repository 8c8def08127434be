package main

import "C"

import "unsafe"

// System, enumeration, device queries and health. Handles are uintptr,
// pointers unsafe.Pointer, unsigned int uint32, int and enums int32,
// unsigned long long uint64: the C ABI of the NVML prototypes.

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(buf unsafe.Pointer, n uint32) int32 {
	return r(lib.SystemGetDriverVersion(buf, n))
}

//export nvmlSystemGetNVMLVersion
func nvmlSystemGetNVMLVersion(buf unsafe.Pointer, n uint32) int32 {
	return r(lib.SystemGetNVMLVersion(buf, n))
}

//export nvmlSystemGetCudaDriverVersion
func nvmlSystemGetCudaDriverVersion(v unsafe.Pointer) int32 {
	return r(lib.SystemGetCudaDriverVersion("nvmlSystemGetCudaDriverVersion", v))
}

//export nvmlSystemGetCudaDriverVersion_v2
func nvmlSystemGetCudaDriverVersion_v2(v unsafe.Pointer) int32 {
	return r(lib.SystemGetCudaDriverVersion("nvmlSystemGetCudaDriverVersion_v2", v))
}

//export nvmlDeviceGetCount
func nvmlDeviceGetCount(n unsafe.Pointer) int32 {
	return r(lib.DeviceGetCount("nvmlDeviceGetCount", n))
}

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(n unsafe.Pointer) int32 {
	return r(lib.DeviceGetCount("nvmlDeviceGetCount_v2", n))
}

//export nvmlDeviceGetHandleByIndex
func nvmlDeviceGetHandleByIndex(i uint32, d unsafe.Pointer) int32 {
	return r(lib.DeviceGetHandleByIndex("nvmlDeviceGetHandleByIndex", i, d))
}

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(i uint32, d unsafe.Pointer) int32 {
	return r(lib.DeviceGetHandleByIndex("nvmlDeviceGetHandleByIndex_v2", i, d))
}

//export nvmlDeviceGetHandleByUUID
func nvmlDeviceGetHandleByUUID(uuid, d unsafe.Pointer) int32 {
	return r(lib.DeviceGetHandleByUUID(uuid, d))
}

//export nvmlDeviceGetHandleByPciBusId
func nvmlDeviceGetHandleByPciBusId(id, d unsafe.Pointer) int32 {
	return r(lib.DeviceGetHandleByPciBusId("nvmlDeviceGetHandleByPciBusId", id, d))
}

//export nvmlDeviceGetHandleByPciBusId_v2
func nvmlDeviceGetHandleByPciBusId_v2(id, d unsafe.Pointer) int32 {
	return r(lib.DeviceGetHandleByPciBusId("nvmlDeviceGetHandleByPciBusId_v2", id, d))
}

//export nvmlDeviceGetHandleBySerial
func nvmlDeviceGetHandleBySerial(serial, d unsafe.Pointer) int32 {
	return r(lib.DeviceGetHandleBySerial(serial, d))
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(d uintptr, buf unsafe.Pointer, n uint32) int32 {
	return r(lib.DeviceGetUUID(d, buf, n))
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(d uintptr, buf unsafe.Pointer, n uint32) int32 {
	return r(lib.DeviceGetName(d, buf, n))
}

//export nvmlDeviceGetSerial
func nvmlDeviceGetSerial(d uintptr, buf unsafe.Pointer, n uint32) int32 {
	return r(lib.DeviceGetSerial(d, buf, n))
}

//export nvmlDeviceGetBoardPartNumber
func nvmlDeviceGetBoardPartNumber(d uintptr, buf unsafe.Pointer, n uint32) int32 {
	return r(lib.DeviceGetBoardPartNumber(d, buf, n))
}

//export nvmlDeviceGetBrand
func nvmlDeviceGetBrand(d uintptr, p unsafe.Pointer) int32 { return r(lib.DeviceGetBrand(d, p)) }

//export nvmlDeviceGetArchitecture
func nvmlDeviceGetArchitecture(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetArchitecture(d, p))
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(d uintptr, major, minor unsafe.Pointer) int32 {
	return r(lib.DeviceGetCudaComputeCapability(d, major, minor))
}

//export nvmlDeviceGetModuleId
func nvmlDeviceGetModuleId(d uintptr, p unsafe.Pointer) int32 { return r(lib.DeviceGetModuleID(d, p)) }

//export nvmlDeviceGetIndex
func nvmlDeviceGetIndex(d uintptr, p unsafe.Pointer) int32 { return r(lib.DeviceGetIndex(d, p)) }

//export nvmlDeviceGetMinorNumber
func nvmlDeviceGetMinorNumber(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetMinorNumber(d, p))
}

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetMemoryInfo(d, p))
}

//export nvmlDeviceGetMemoryInfo_v2
func nvmlDeviceGetMemoryInfo_v2(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetMemoryInfo_v2(d, p))
}

//export nvmlDeviceGetPciInfo
func nvmlDeviceGetPciInfo(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetPciInfo("nvmlDeviceGetPciInfo", d, p))
}

//export nvmlDeviceGetPciInfo_v2
func nvmlDeviceGetPciInfo_v2(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetPciInfo("nvmlDeviceGetPciInfo_v2", d, p))
}

//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetPciInfo("nvmlDeviceGetPciInfo_v3", d, p))
}

//export nvmlDeviceGetPciInfoExt
func nvmlDeviceGetPciInfoExt(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetPciInfoExt(d, p))
}

//export nvmlDeviceGetNumaNodeId
func nvmlDeviceGetNumaNodeId(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetNumaNodeId(d, p))
}

//export nvmlDeviceGetComputeMode
func nvmlDeviceGetComputeMode(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetComputeMode(d, p))
}

//export nvmlDeviceSetComputeMode
func nvmlDeviceSetComputeMode(d uintptr, mode int32) int32 {
	return r(lib.DeviceSetComputeMode(d, mode))
}

//export nvmlDeviceGetP2PStatus
func nvmlDeviceGetP2PStatus(d1, d2 uintptr, index int32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetP2PStatus(d1, d2, index, p))
}

//export nvmlDeviceGetAttributes
func nvmlDeviceGetAttributes(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetAttributes("nvmlDeviceGetAttributes", d, p))
}

//export nvmlDeviceGetAttributes_v2
func nvmlDeviceGetAttributes_v2(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetAttributes("nvmlDeviceGetAttributes_v2", d, p))
}

//export nvmlDeviceGetTemperature
func nvmlDeviceGetTemperature(d uintptr, sensor int32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetTemperature(d, sensor, p))
}

//export nvmlDeviceGetSupportedEventTypes
func nvmlDeviceGetSupportedEventTypes(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetSupportedEventTypes(d, p))
}

//export nvmlDeviceRegisterEvents
func nvmlDeviceRegisterEvents(d uintptr, types uint64, set uintptr) int32 {
	return r(lib.DeviceRegisterEvents(d, types, set))
}

//export nvmlDeviceGetTotalEccErrors
func nvmlDeviceGetTotalEccErrors(d uintptr, errType, counter int32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetTotalEccErrors(d, errType, counter, p))
}

//export nvmlDeviceGetFieldValues
func nvmlDeviceGetFieldValues(d uintptr, n int32, values unsafe.Pointer) int32 {
	return r(lib.DeviceGetFieldValues(d, n, values))
}

//export nvmlEventSetCreate
func nvmlEventSetCreate(p unsafe.Pointer) int32 { return r(lib.EventSetCreate(p)) }

//export nvmlEventSetFree
func nvmlEventSetFree(set uintptr) int32 { return r(lib.EventSetFree(set)) }

//export nvmlEventSetWait
func nvmlEventSetWait(set uintptr, data unsafe.Pointer, timeoutMs uint32) int32 {
	return r(lib.EventSetWait("nvmlEventSetWait", set, data, timeoutMs))
}

//export nvmlEventSetWait_v2
func nvmlEventSetWait_v2(set uintptr, data unsafe.Pointer, timeoutMs uint32) int32 {
	return r(lib.EventSetWait("nvmlEventSetWait_v2", set, data, timeoutMs))
}

//export nvmlDeviceGetGpuFabricInfo
func nvmlDeviceGetGpuFabricInfo(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuFabricInfo(d, p))
}

//export nvmlDeviceGetGpuFabricInfoV
func nvmlDeviceGetGpuFabricInfoV(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetGpuFabricInfoV(d, p))
}

//export nvmlDeviceGetAddressingMode
func nvmlDeviceGetAddressingMode(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetAddressingMode(d, p))
}
