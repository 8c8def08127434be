package fmsim

import (
	"context"

	"github.com/gpudra/gpudra/test/cshared"
)

// LibPackage is the main package of the simulated libnvfm.
const LibPackage = "github.com/gpudra/gpudra/test/fmsim/lib"

// SONAME is the real Fabric Manager library's SONAME.
const SONAME = "libnvfm.so.1"

// LDFlags are the linker flags of the library, here and in the Makefile's
// sim-fm-lib (TestMakefileBuildsLikeBuild): stripped, with the real
// library's SONAME.
const LDFlags = "-s -w -extldflags -Wl,-soname," + SONAME

// Build compiles the simulated library into the file out, as
// `make sim-fm-lib` does. It runs the go command (from PATH, with a C
// compiler for cgo) inside this module. The C header the build writes next
// to out is removed.
func Build(ctx context.Context, out string) error {
	return cshared.Build(ctx, "the simulated libnvfm", LibPackage, LDFlags, out)
}
