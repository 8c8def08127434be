package fmsim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building the simulated libnvfm needs the go command in PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags="+LDFlags, "-o", out, LibPackage)
	cmd.Env = os.Environ()
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the simulated libnvfm (%s): %w\n%s", LibPackage, err, o)
	}
	_ = os.Remove(strings.TrimSuffix(out, ".so") + ".h")
	return nil
}
