// Package driverlib makes the fake driver tools (gpudra-fake-nvidia-smi,
// gpudra-fake-mps-control) as demanding as the real ones about how they are
// started: they are dynamically linked against the C library, like the
// driver's tools, so a foreign libc.so.6 on their loader path breaks them;
// and like the real nvidia-smi, which loads libnvidia-ml.so.1 by its
// SONAME, they fail unless the driver's NVML library can be loaded (from a
// preload, the loader cache of the root they run chrooted in, or the
// library path).
package driverlib

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// SONAME is the library the driver's tools load.
const SONAME = "libnvidia-ml.so.1"

// Require loads SONAME the way the real tools do (by name, through the
// dynamic loader's search) and returns an error saying how tool was
// started wrongly when it cannot.
func Require(tool string) error {
	name := C.CString(SONAME)
	defer C.free(unsafe.Pointer(name))
	if h := C.dlopen(name, C.RTLD_NOW|C.RTLD_GLOBAL); h != nil {
		return nil
	}
	return fmt.Errorf("%s: cannot load %s (%s): the NVIDIA driver's libraries are not reachable from this process "+
		"(run it chrooted into the driver root, or preload the driver's %s)", tool, SONAME, C.GoString(C.dlerror()), SONAME)
}
