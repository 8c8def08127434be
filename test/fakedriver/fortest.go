package fakedriver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

// LibraryEnv names a built simulated libnvidia-ml to use instead of building
// one (make sim-nvml-lib puts it at _output/lib/libnvidia-ml-sim.so).
const LibraryEnv = "GPUDRA_SIM_NVML_LIBRARY"

// RootEnv tells the simulated libnvidia-ml which driver root to simulate at
// its next nvmlInit instead of the one it was loaded from. A process loads
// the library once (the dynamic loader hands out the first one loaded for
// every later dlopen), so tests that use several roots in one process
// select each with it.
const RootEnv = "GPUDRA_SIM_NVML_ROOT"

// libraryFile is the simulated library's file name in Build's directory.
const libraryFile = "libnvidia-ml-sim.so"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Library is the simulated libnvidia-ml that ForTest puts into its roots:
// $GPUDRA_SIM_NVML_LIBRARY, else the one Build made in dir.
func Library(dir string) string {
	if lib := os.Getenv(LibraryEnv); lib != "" {
		return lib
	}
	return filepath.Join(dir, libraryFile)
}

// Build compiles the simulated library (unless $GPUDRA_SIM_NVML_LIBRARY names
// one) and the fake tools once per process into _output/test/fakedriver of
// the module and returns that directory (see Library). Go's build
// cache makes a rebuild cheap; each file is renamed into place, so test
// processes building at the same time never see a half-written one.
func Build() (string, error) {
	buildOnce.Do(func() { buildDir, buildErr = build() })
	return buildDir, buildErr
}

func build() (string, error) {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root (go env GOMOD): %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(mod)))
	dir := filepath.Join(root, "_output", "test", "fakedriver")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf(".%d", os.Getpid())
	builds := map[string][]string{
		FakeNvidiaSMI:  {"build", "-o", FakeNvidiaSMI + tmp, "./test/cmd/" + FakeNvidiaSMI},
		FakeMPSControl: {"build", "-o", FakeMPSControl + tmp, "./test/cmd/" + FakeMPSControl},
		FakeIMEX:       {"build", "-o", FakeIMEX + tmp, "./test/cmd/" + FakeIMEX},
		FakeIMEXCtl:    {"build", "-o", FakeIMEXCtl + tmp, "./test/cmd/" + FakeIMEXCtl},
	}
	if os.Getenv(LibraryEnv) == "" {
		lib := filepath.Join(dir, libraryFile)
		if err := nvmlsim.Build(context.Background(), lib+tmp); err != nil {
			return "", err
		}
		if err := os.Rename(lib+tmp, lib); err != nil {
			return "", err
		}
	}
	for name, args := range builds {
		args[2] = filepath.Join(dir, args[2]) // the output of "-o"
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		if err := os.Rename(args[2], filepath.Join(dir, name)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// ForTest generates a fake driver root for profile and node in a temporary
// directory of t, with the simulated library and fake tools built once per
// test process. It must run as root (device nodes), like the tests of the
// local cluster.
func ForTest(t testing.TB, profile, node string) string {
	t.Helper()
	return ForTestLayout(t, profile, node, "host")
}

// ForTestLayout is ForTest for one of Layouts.
func ForTestLayout(t testing.TB, profile, node, layout string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a fake driver root has device nodes: run the tests as root")
	}
	dir, err := Build()
	if err != nil {
		t.Fatalf("build the simulated libnvidia-ml and fake tools: %v", err)
	}
	root := filepath.Join(t.TempDir(), "driver-root")
	if err := Generate(Options{Dir: root, Profile: profile, Node: node,
		NVMLLibrary: Library(dir), ToolsDir: dir, Layout: layout}); err != nil {
		t.Fatalf("generate a fake driver root: %v", err)
	}
	t.Setenv(RootEnv, root)
	return root
}
