// Command lib is the simulated libnvidia-ml.so, built with
//
//	go build -buildmode=c-shared -trimpath -ldflags "-s -w" -o libnvidia-ml.so ./test/nvmlsim/lib
//
// (make sim-nvml-lib). Test-only, never shipped: see test/nvmlsim/README.md.
//
// Its process also runs the caller's Go runtime (the plugin is a Go program
// that dlopen()s the library through go-nvml), so the exports stay thin:
// they convert C arguments and call package nvmlsim. The library installs
// no signal handlers of its own beyond what any Go c-shared library does,
// and never calls back into the caller.
package main

//go:generate go run ../internal/genstubs -o stubs_generated.c

import "C"

import (
	"runtime/debug"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

var lib = newLib()

func newLib() *nvmlsim.Library {
	l := nvmlsim.New(getenv, selfPaths)
	// Loading the profile (YAML, the embedded models) leaves garbage that
	// this library's own Go runtime would return to the kernel only slowly.
	// NVIDIA's C library has no such heap: return it once the node is
	// built, so that the memory measured in the plugin's process is less of
	// what a node does not have (docs/design/prepare-costs.md#memory).
	l.OnOpen = debug.FreeOSMemory
	return l
}

func r(ret nvml.Return) int32 { return int32(ret) }

//export nvmlInit_v2
func nvmlInit_v2() int32 { return r(lib.Init()) }

//export nvmlInit
func nvmlInit() int32 { return r(lib.Init()) }

//export nvmlInitWithFlags
func nvmlInitWithFlags(flags uint32) int32 { return r(lib.Init()) }

//export nvmlShutdown
func nvmlShutdown() int32 { return r(lib.Shutdown()) }

//export nvmlErrorString
func nvmlErrorString(ret int32) *C.char { return errorString(nvml.Return(ret)) }

//export gpudraSimNotSupported
func gpudraSimNotSupported(name *C.char) int32 { return r(lib.NotSupported(C.GoString(name))) }

func main() {}
