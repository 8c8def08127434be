package nvmllib

import (
	"errors"
	"github.com/gpudra/gpudra/pkg/discovery"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/pkg/nvmllib/sim"
)

func TestNewSimulated(t *testing.T) {
	lib, err := New(Options{Simulate: "dgx-h100", NodeName: "n1"})
	require.NoError(t, err)
	defer func() { assert.Equal(t, nvml.SUCCESS, lib.Shutdown()) }()

	n, ret := lib.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, 8, n)
	d, ret := lib.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	name, _ := d.GetName()
	assert.Equal(t, "NVIDIA H100 80GB HBM3", name)
	version, _ := lib.SystemGetCudaDriverVersion()
	assert.Equal(t, 12080, version)

	resolver, ok := lib.(discovery.PCIeRootResolver)
	require.True(t, ok, "the simulator knows PCIe roots")
	root, ok := resolver.PCIeRoot("0000:1b:00.0")
	assert.True(t, ok)
	assert.Equal(t, "pci0000:15", root)

	// Same node: same UUIDs; another node: others.
	again, err := New(Options{Simulate: "dgx-h100", NodeName: "n1"})
	require.NoError(t, err)
	other, err := New(Options{Simulate: "dgx-h100", NodeName: "n2"})
	require.NoError(t, err)
	u1, _ := d.GetUUID()
	d2, _ := again.DeviceGetHandleByIndex(0)
	u2, _ := d2.GetUUID()
	d3, _ := other.DeviceGetHandleByIndex(0)
	u3, _ := d3.GetUUID()
	assert.Equal(t, u1, u2)
	assert.NotEqual(t, u1, u3)
}

func TestNewSimulatedUserProfile(t *testing.T) {
	dir := t.TempDir()
	doc := "driverVersion: \"570.124.06\"\ncudaDriverVersion: \"12.8\"\ngpus: [{model: l40s, count: 3}]\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lab.yaml"), []byte(doc), 0o600))
	lib, err := New(Options{Simulate: "lab", ProfileDirs: []string{dir}})
	require.NoError(t, err)
	defer func() { _ = lib.Shutdown() }()
	n, _ := lib.DeviceGetCount()
	assert.Equal(t, 3, n)
	assert.Equal(t, "lab", lib.(*sim.Server).Profile().Name)
}

func TestNewUnknownProfile(t *testing.T) {
	_, err := New(Options{Simulate: "dgx-z100", NodeName: "n1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"dgx-z100"`)
	for _, name := range sim.Builtin() {
		assert.Contains(t, err.Error(), name)
	}
}

func TestNewRealWithoutLibrary(t *testing.T) {
	root := t.TempDir()
	_, err := New(Options{DriverRoot: root})
	require.ErrorIs(t, err, ErrLibraryNotFound)
	assert.Contains(t, err.Error(), root)
	assert.Contains(t, err.Error(), "--nvidia-driver-root")
	assert.Contains(t, err.Error(), "--simulate")
}

// TestNewRealUnloadableLibrary goes through the real go-nvml loader: a file
// that is not a shared library fails to load.
func TestNewRealUnloadableLibrary(t *testing.T) {
	root := tree(t, "usr/lib64/libnvidia-ml.so.1")
	_, err := New(Options{DriverRoot: root})
	require.Error(t, err)
	var initErr *InitError
	require.ErrorAs(t, err, &initErr)
	assert.Equal(t, filepath.Join(root, "usr/lib64/libnvidia-ml.so.1"), initErr.Library)
	assert.ErrorIs(t, err, nvml.ERROR_LIBRARY_NOT_FOUND)
	assert.Contains(t, err.Error(), "could not be loaded")
	require.Error(t, initErr.LoadError, "the loader's reason is kept")
	assert.Contains(t, err.Error(), initErr.LoadError.Error())
}

func TestNewRealInitFailures(t *testing.T) {
	root := tree(t, "usr/lib64/libnvidia-ml.so.1")
	tests := []struct {
		ret  nvml.Return
		hint string
	}{
		{nvml.ERROR_DRIVER_NOT_LOADED, "kernel module is not loaded"},
		{nvml.ERROR_NO_PERMISSION, "/dev/nvidia*"},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "does not match the version of the loaded kernel module"},
		{nvml.ERROR_LIBRARY_NOT_FOUND, "could not be loaded"},
		{nvml.ERROR_UNKNOWN, "--simulate"},
	}
	for _, tc := range tests {
		t.Run(tc.ret.Error(), func(t *testing.T) {
			var opened string
			orig := newLibrary
			t.Cleanup(func() { newLibrary = orig })
			newLibrary = func(path string) nvml.Interface {
				opened = path
				return &mock.Interface{InitFunc: func() nvml.Return { return tc.ret }}
			}
			_, err := New(Options{DriverRoot: root})
			require.Error(t, err)
			assert.Equal(t, filepath.Join(root, "usr/lib64/libnvidia-ml.so.1"), opened)
			assert.True(t, errors.Is(err, tc.ret))
			assert.Contains(t, err.Error(), nvml.ErrorString(tc.ret))
			assert.Contains(t, err.Error(), tc.hint)
			assert.Contains(t, err.Error(), opened)
		})
	}
}

func TestNewRealSuccess(t *testing.T) {
	root := tree(t, "usr/lib64/libnvidia-ml.so.1")
	orig := newLibrary
	t.Cleanup(func() { newLibrary = orig })
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.SUCCESS }}
	newLibrary = func(string) nvml.Interface { return lib }
	got, err := New(Options{DriverRoot: root})
	require.NoError(t, err)
	assert.Same(t, lib, got)
	assert.Len(t, lib.InitCalls(), 1)
}
