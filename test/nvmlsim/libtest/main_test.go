package libtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

const (
	// libEnv hands a child test process the library its parent built.
	libEnv = "NVMLSIM_LIBTEST_LIB"
	node   = "node-a"
	// Where a fake driver root keeps the library and the simulator state.
	libDir    = "usr/lib/x86_64-linux-gnu"
	stateFile = "var/lib/gpudra-sim/nvml-state.json"
	faultFile = "var/lib/gpudra-sim/faults"
	procDir   = "var/lib/gpudra-sim/processes"
)

// libPath is the library built for this test binary.
var libPath string

func TestMain(m *testing.M) {
	if p := os.Getenv(libEnv); p != "" {
		libPath = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "nvmlsim-libtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	libPath = filepath.Join(dir, "libnvidia-ml-sim.so")
	if err := nvmlsim.Build(context.Background(), libPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// newRoot makes a fake driver root for profile (a built-in name, or a path
// that is copied into the root) with the library symlinked into it.
func newRoot(t *testing.T, profile string) string {
	t.Helper()
	root := t.TempDir()
	cfg := nvmlsim.Config{Profile: profile, Node: node, StateFile: stateFile, FaultFile: faultFile, ProcessDir: procDir}
	if strings.HasSuffix(profile, ".yaml") {
		data, err := os.ReadFile(profile)
		require.NoError(t, err)
		cfg.Profile = "etc/gpudra-sim/profile.yaml"
		require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/gpudra-sim"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, cfg.Profile), data, 0o644))
	}
	require.NoError(t, nvmlsim.WriteConfig(root, cfg))
	require.NoError(t, os.MkdirAll(filepath.Join(root, libDir), 0o755))
	require.NoError(t, os.Symlink(libPath, filepath.Join(root, libDir, "libnvidia-ml.so.1")))
	return root
}

// open initializes the library for root; the test's cleanup shuts it down.
func open(t *testing.T, root string) nvml.Interface {
	t.Helper()
	t.Setenv(nvmlsim.RootEnv, root)
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(root, libDir, "libnvidia-ml.so.1")))
	require.Equal(t, nvml.SUCCESS, lib.Init())
	t.Cleanup(func() { require.Equal(t, nvml.SUCCESS, lib.Shutdown()) })
	return lib
}

func ctx(t *testing.T) context.Context {
	_, c := ktesting.NewTestContext(t)
	return c
}

func ok(t *testing.T, ret nvml.Return, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, nvml.SUCCESS, ret, msgAndArgs...)
}
