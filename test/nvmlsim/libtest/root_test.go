package libtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/test/nvmlsim"
)

// childEnv makes a re-run test binary act as the child of a test.
const childEnv = "NVMLSIM_LIBTEST_CHILD_ROOT"

// installLib installs the library as the contract lays it out: the file
// libnvidia-ml.so.<driver version> and the libnvidia-ml.so.1 link to it.
func installLib(t *testing.T, root, driverVersion string) {
	t.Helper()
	data, err := os.ReadFile(libPath)
	require.NoError(t, err)
	dir := filepath.Join(root, libDir)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "libnvidia-ml.so."+driverVersion), data, 0o755))
	require.NoError(t, os.Symlink("libnvidia-ml.so."+driverVersion, filepath.Join(dir, "libnvidia-ml.so.1")))
}

// runChild re-runs this test binary for test with root, without
// GPUDRA_SIM_NVML_ROOT: a fresh process whose first libnvidia-ml is the
// root's.
func runChild(t *testing.T, test, root string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, nvmlsim.RootEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"="+root, libEnv+"="+libPath)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestRootFromLibraryPath: without GPUDRA_SIM_NVML_ROOT the library finds
// its root from its own path, opened the plugin's way
// (nvmllib.New with the root as --nvidia-driver-root).
func TestRootFromLibraryPath(t *testing.T) {
	if root := os.Getenv(childEnv); root != "" {
		lib, err := nvmllib.New(root)
		require.NoError(t, err)
		defer func() { _ = lib.Shutdown() }()
		dev, ret := lib.DeviceGetHandleByIndex(0)
		ok(t, ret)
		uuid, ret := dev.GetUUID()
		ok(t, ret)
		version, ret := lib.SystemGetDriverVersion()
		ok(t, ret)
		fmt.Printf("CHILD uuid=%s driver=%s\n", uuid, version)
		return
	}
	root := t.TempDir()
	require.NoError(t, nvmlsim.WriteConfig(root, nvmlsim.Config{Profile: "dgx-h100", Node: node, StateFile: stateFile}))
	installLib(t, root, "570.124.06")
	out, err := runChild(t, "TestRootFromLibraryPath", root)
	require.NoError(t, err, out)

	dev, ret := server(t, "dgx-h100").DeviceGetHandleByIndex(0)
	ok(t, ret)
	uuid, _ := dev.GetUUID()
	require.Contains(t, out, "CHILD uuid="+uuid+" driver=570.124.06\n")
	require.FileExists(t, filepath.Join(root, stateFile), "the state file is under the root")
}

// TestInitFailsWithoutConfig: a library outside any fake root fails
// nvmlInit with DRIVER_NOT_LOADED and says why on stderr.
func TestInitFailsWithoutConfig(t *testing.T) {
	if root := os.Getenv(childEnv); root != "" {
		_, err := nvmllib.New(root)
		var ie *nvmllib.InitError
		require.True(t, errors.As(err, &ie), "%v", err)
		require.Equal(t, nvml.ERROR_DRIVER_NOT_LOADED, ie.Return)
		return
	}
	root := t.TempDir()
	installLib(t, root, "570.124.06")
	out, err := runChild(t, "TestInitFailsWithoutConfig", root)
	require.NoError(t, err, out)
	require.Contains(t, out, "gpudra simulated NVML: nvmlInit failed: no "+nvmlsim.ConfigPath+" in any directory above "+
		filepath.Join(root, libDir, "libnvidia-ml.so."))
}
