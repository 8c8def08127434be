package fakedriver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// LibraryEnv names a built simulated libnvidia-ml to use instead of building
// one (make sim-nvml-lib puts it at _output/lib/libnvidia-ml-sim.so).
const LibraryEnv = "GPUDRA_SIM_NVML_LIBRARY"

// Packages of the simulated library and the fake tools, in this module.
const (
	libraryPackage = "./test/nvmlsim/lib"
	libraryFile    = "libnvidia-ml-sim.so"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Build compiles the simulated library and the fake tools once per process
// into a temporary directory and returns it (the library is
// <dir>/libnvidia-ml-sim.so, the tools are beside it).
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
	dir, err := os.MkdirTemp("", "gpudra-fakedriver-")
	if err != nil {
		return "", err
	}
	steps := [][]string{
		{"build", "-o", dir + "/", "./test/cmd/" + FakeNvidiaSMI, "./test/cmd/" + FakeMPSControl},
	}
	if lib := os.Getenv(LibraryEnv); lib != "" {
		if err := os.Symlink(lib, filepath.Join(dir, libraryFile)); err != nil {
			return "", err
		}
	} else {
		steps = append(steps, []string{"build", "-buildmode=c-shared", "-trimpath", "-o", filepath.Join(dir, libraryFile), libraryPackage})
	}
	for _, args := range steps {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
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
	if os.Geteuid() != 0 {
		t.Fatal("a fake driver root has device nodes: run the tests as root")
	}
	dir, err := Build()
	if err != nil {
		t.Fatalf("build the simulated libnvidia-ml and fake tools: %v", err)
	}
	root := filepath.Join(t.TempDir(), "driver-root")
	if err := Generate(Options{Dir: root, Profile: profile, Node: node,
		NVMLLibrary: filepath.Join(dir, libraryFile), ToolsDir: dir}); err != nil {
		t.Fatalf("generate a fake driver root: %v", err)
	}
	return root
}
