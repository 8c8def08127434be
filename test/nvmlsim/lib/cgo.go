package main

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

// gpudra_sim_self returns the file name this library was loaded by.
static const char *gpudra_sim_self(void) {
	Dl_info info;
	if (dladdr((void *)&gpudra_sim_self, &info) && info.dli_fname != NULL) {
		return info.dli_fname;
	}
	return NULL;
}

static unsigned long gpudra_sim_self_addr(void) { return (unsigned long)&gpudra_sim_self; }
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

// getenv reads the live process environment through the C library: the
// library's Go runtime only has a copy taken when it was loaded.
func getenv(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return ""
	}
	return C.GoString(v)
}

func selfPaths() []string {
	return nvmlsim.SelfPaths(C.GoString(C.gpudra_sim_self()), uintptr(C.gpudra_sim_self_addr()))
}

// errorStrings keeps the C strings nvmlErrorString returns, one per code,
// for the life of the process (the caller does not free them).
var errorStrings sync.Map // nvml.Return -> *C.char

func errorString(ret nvml.Return) *C.char {
	if s, ok := errorStrings.Load(ret); ok {
		return s.(*C.char)
	}
	cs := C.CString(nvmlsim.ErrorString(ret))
	s, loaded := errorStrings.LoadOrStore(ret, cs)
	if loaded {
		C.free(unsafe.Pointer(cs))
	}
	return s.(*C.char)
}
