package main

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

// gpudra_fmsim_self returns the file name this library was loaded by.
static const char *gpudra_fmsim_self(void) {
	Dl_info info;
	if (dladdr((void *)&gpudra_fmsim_self, &info) && info.dli_fname != NULL) {
		return info.dli_fname;
	}
	return NULL;
}

static unsigned long gpudra_fmsim_self_addr(void) { return (unsigned long)&gpudra_fmsim_self; }
*/
import "C"

import (
	"unsafe"

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
	return nvmlsim.SelfPaths(C.GoString(C.gpudra_fmsim_self()), uintptr(C.gpudra_fmsim_self_addr()))
}
