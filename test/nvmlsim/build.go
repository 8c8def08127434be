package nvmlsim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// LibPackage is the main package of the simulated library.
const LibPackage = "github.com/gpudra/gpudra/test/nvmlsim/lib"

// LDFlags are the linker flags of the library, here and in the Makefile's
// sim-nvml-lib (TestMakefileBuildsLikeBuild): stripped, and with the real
// library's SONAME, so that ldconfig (the nvidia-cdi-hook's update-ldcache
// in a container) indexes it as libnvidia-ml.so.1, as it does the driver's.
const LDFlags = "-s -w -extldflags -Wl,-soname," + SONAME

// SONAME is the real NVML library's SONAME.
const SONAME = "libnvidia-ml.so.1"

// Build compiles the simulated library into the file out, as
// `make sim-nvml-lib` does. It runs the go command (from PATH, with a C
// compiler for cgo) and must run inside this module. The C header the
// build writes next to out is removed.
func Build(ctx context.Context, out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building the simulated NVML library needs the go command in PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags="+LDFlags, "-o", out, LibPackage)
	cmd.Env = os.Environ()
	if os.Getenv("CGO_CFLAGS") == "" {
		// go-nvml's bindings warn about NVML functions deprecated in CUDA 13.
		cmd.Env = append(cmd.Env, "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	}
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the simulated NVML library (%s): %w\n%s", LibPackage, err, o)
	}
	_ = os.Remove(strings.TrimSuffix(out, ".so") + ".h")
	return nil
}
