package main

import "C"

import "unsafe"

// Telemetry: utilization, power, clocks, clocks event reasons and GPM
// (see exports_device.go for the conventions). nvmlGpmSample_t is a struct
// of one pointer, passed like a pointer.

//export nvmlDeviceGetUtilizationRates
func nvmlDeviceGetUtilizationRates(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetUtilizationRates(d, p))
}

//export nvmlDeviceGetPowerUsage
func nvmlDeviceGetPowerUsage(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetPowerUsage(d, p))
}

//export nvmlDeviceGetEnforcedPowerLimit
func nvmlDeviceGetEnforcedPowerLimit(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetEnforcedPowerLimit(d, p))
}

//export nvmlDeviceGetClockInfo
func nvmlDeviceGetClockInfo(d uintptr, clockType int32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetClockInfo("nvmlDeviceGetClockInfo", d, clockType, p))
}

//export nvmlDeviceGetMaxClockInfo
func nvmlDeviceGetMaxClockInfo(d uintptr, clockType int32, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetClockInfo("nvmlDeviceGetMaxClockInfo", d, clockType, p))
}

//export nvmlDeviceGetCurrentClocksEventReasons
func nvmlDeviceGetCurrentClocksEventReasons(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetCurrentClocksEventReasons("nvmlDeviceGetCurrentClocksEventReasons", d, p))
}

//export nvmlDeviceGetCurrentClocksThrottleReasons
func nvmlDeviceGetCurrentClocksThrottleReasons(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.DeviceGetCurrentClocksEventReasons("nvmlDeviceGetCurrentClocksThrottleReasons", d, p))
}

//export nvmlGpmQueryDeviceSupport
func nvmlGpmQueryDeviceSupport(d uintptr, p unsafe.Pointer) int32 {
	return r(lib.GpmQueryDeviceSupport(d, p))
}

//export nvmlGpmSampleAlloc
func nvmlGpmSampleAlloc(p unsafe.Pointer) int32 { return r(lib.GpmSampleAlloc(p)) }

//export nvmlGpmSampleFree
func nvmlGpmSampleFree(s uintptr) int32 { return r(lib.GpmSampleFree(s)) }

//export nvmlGpmSampleGet
func nvmlGpmSampleGet(d, s uintptr) int32 { return r(lib.GpmSampleGet("nvmlGpmSampleGet", d, -1, s)) }

//export nvmlGpmMigSampleGet
func nvmlGpmMigSampleGet(d uintptr, gi uint32, s uintptr) int32 {
	return r(lib.GpmSampleGet("nvmlGpmMigSampleGet", d, int(gi), s))
}

//export nvmlGpmMetricsGet
func nvmlGpmMetricsGet(p unsafe.Pointer) int32 { return r(lib.GpmMetricsGet(p)) }
