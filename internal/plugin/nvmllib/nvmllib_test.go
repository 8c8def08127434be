package nvmllib

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewRealWithoutLibrary(t *testing.T) {
	root := t.TempDir()
	_, err := New(root)
	require.ErrorIs(t, err, ErrLibraryNotFound)
	assert.Contains(t, err.Error(), root)
	assert.Contains(t, err.Error(), "--nvidia-driver-root")
	assert.Contains(t, err.Error(), "make fake-driver-root")
}

// TestNewRealUnloadableLibrary goes through the real go-nvml loader: a file
// that is not a shared library fails to load.
func TestNewRealUnloadableLibrary(t *testing.T) {
	root := tree(t, "usr/lib64/libnvidia-ml.so.1")
	_, err := New(root)
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
		{nvml.ERROR_UNKNOWN, "make fake-driver-root"},
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
			_, err := New(root)
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
	got, err := New(root)
	require.NoError(t, err)
	assert.Same(t, lib, got)
	assert.Len(t, lib.InitCalls(), 1)
}
