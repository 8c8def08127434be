package nvmlsim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpudra/gpudra/test/cshared"
	"github.com/gpudra/gpudra/test/repo"
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
	var env []string
	if os.Getenv("CGO_CFLAGS") == "" {
		// go-nvml's bindings warn about NVML functions deprecated in CUDA 13.
		env = append(env, "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	}
	return cshared.Build(ctx, "the simulated NVML library", LibPackage, LDFlags, out, env...)
}

var (
	testLibOnce sync.Once
	testLib     string
	testLibErr  error
)

// TestLibrary builds the library once per process into
// _output/test/nvmlsim of the module and returns its path, for tests that
// start the fake driver tools without a fake driver root: like the real
// tools they load libnvidia-ml.so.1 and need it preloaded (ToolEnv).
func TestLibrary() (string, error) {
	testLibOnce.Do(func() {
		root, err := repo.Root()
		if err != nil {
			testLibErr = err
			return
		}
		dir := filepath.Join(root, "_output", "test", "nvmlsim")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			testLibErr = err
			return
		}
		out := filepath.Join(dir, "libnvidia-ml-sim.so")
		tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
		if err := Build(context.Background(), tmp); err != nil {
			testLibErr = err
			return
		}
		testLib, testLibErr = out, os.Rename(tmp, out)
	})
	return testLib, testLibErr
}

// ToolEnv is the environment addition that starts a fake driver tool the
// way the plugin starts a driver root's tools: with only the (simulated)
// libnvidia-ml.so.1 preloaded.
func ToolEnv() ([]string, error) {
	lib, err := TestLibrary()
	if err != nil {
		return nil, fmt.Errorf("build the simulated NVML library for the fake tools: %w", err)
	}
	return []string{"LD_PRELOAD=" + lib}, nil
}
