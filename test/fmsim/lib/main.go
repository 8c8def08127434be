// Command lib is the simulated libnvfm.so, NVSwitch Fabric Manager's client
// library, built with
//
//	go build -buildmode=c-shared -trimpath -ldflags "-s -w -extldflags -Wl,-soname,libnvfm.so.1" -o libnvfm.so ./test/fmsim/lib
//
// (make sim-fm-lib). Test-only, never shipped: see test/fmsim/README.md. As
// the simulated libnvidia-ml (test/nvmlsim/lib), the exports only convert C
// arguments and call package fmsim; a panic becomes FM_ST_GENERIC_ERROR with
// the stack on stderr. Every function go-nvfm binds is defined: a process
// dies at a call of a symbol its library lacks.
package main

import "C"

import (
	"fmt"
	"os"
	"runtime/debug"
	"unsafe"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"

	"github.com/gpudra/gpudra/test/fmsim"
)

var lib = fmsim.New(getenv, selfPaths)

// call runs f, turning a panic into GENERIC_ERROR.
func call(name string, f func() nvfm.Return) (ret int32) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "gpudra simulated libnvfm: panic in %s: %v\n%s", name, p, debug.Stack())
			ret = int32(nvfm.GENERIC_ERROR)
		}
	}()
	return int32(f())
}

//export fmLibInit
func fmLibInit() int32 { return call("fmLibInit", lib.Init) }

//export fmLibShutdown
func fmLibShutdown() int32 { return call("fmLibShutdown", lib.Shutdown) }

//export fmConnect
func fmConnect(params, handle unsafe.Pointer) int32 {
	return call("fmConnect", func() nvfm.Return { return lib.Connect(params, handle) })
}

//export fmDisconnect
func fmDisconnect(h uintptr) int32 {
	return call("fmDisconnect", func() nvfm.Return { return lib.Disconnect(h) })
}

//export fmGetSupportedFabricPartitions
func fmGetSupportedFabricPartitions(h uintptr, list unsafe.Pointer) int32 {
	return call("fmGetSupportedFabricPartitions", func() nvfm.Return { return lib.GetSupportedFabricPartitions(h, list) })
}

//export fmActivateFabricPartition
func fmActivateFabricPartition(h uintptr, id uint32) int32 {
	return call("fmActivateFabricPartition", func() nvfm.Return { return lib.ActivateFabricPartition(h, id) })
}

//export fmActivateFabricPartitionWithVFs
func fmActivateFabricPartitionWithVFs(h uintptr, id uint32, vfList unsafe.Pointer, numVfs uint32) int32 {
	_, _ = vfList, numVfs // the call is not simulated
	return call("fmActivateFabricPartitionWithVFs", func() nvfm.Return { return lib.ActivateFabricPartitionWithVFs(h, id) })
}

//export fmDeactivateFabricPartition
func fmDeactivateFabricPartition(h uintptr, id uint32) int32 {
	return call("fmDeactivateFabricPartition", func() nvfm.Return { return lib.DeactivateFabricPartition(h, id) })
}

//export fmSetActivatedFabricPartitions
func fmSetActivatedFabricPartitions(h uintptr, list unsafe.Pointer) int32 {
	return call("fmSetActivatedFabricPartitions", func() nvfm.Return { return lib.SetActivatedFabricPartitions(h, list) })
}

//export fmGetNvlinkFailedDevices
func fmGetNvlinkFailedDevices(h uintptr, devices unsafe.Pointer) int32 {
	return call("fmGetNvlinkFailedDevices", func() nvfm.Return { return lib.GetNvlinkFailedDevices(h, devices) })
}

//export fmGetUnsupportedFabricPartitions
func fmGetUnsupportedFabricPartitions(h uintptr, list unsafe.Pointer) int32 {
	return call("fmGetUnsupportedFabricPartitions", func() nvfm.Return { return lib.GetUnsupportedFabricPartitions(h, list) })
}

func main() {}
