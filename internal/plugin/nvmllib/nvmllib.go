// Package nvmllib opens the NVML library the plugin discovers GPUs with:
// libnvidia-ml.so.1 of the NVIDIA driver installed under a driver root. A
// simulated node is a fake driver root whose libnvidia-ml is built from
// package sim (test/nvmlsim); the plugin cannot tell the difference and has
// no other code path.
package nvmllib

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// New opens and initializes libnvidia-ml.so.1 under driverRoot ("/" when
// empty); the caller must call Shutdown when done with it.
func New(driverRoot string) (nvml.Interface, error) {
	return newReal(driverRoot)
}

// newLibrary opens the real library; tests replace it.
var newLibrary = func(path string) nvml.Interface {
	return nvml.New(nvml.WithLibraryPath(path))
}

func newReal(driverRoot string) (nvml.Interface, error) {
	path, err := FindLibrary(driverRoot)
	if err != nil {
		return nil, err
	}
	lib := newLibrary(path)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		e := &InitError{Library: path, Return: ret}
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			e.LoadError = loadError(path)
		}
		return nil, e
	}
	return lib, nil
}

// loadError returns why the dynamic loader refuses path (go-nvml only
// reports ERROR_LIBRARY_NOT_FOUND), or nil if it loads.
func loadError(path string) error {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return err
	}
	_ = lib.Close()
	return nil
}

// InitError reports that nvmlInit failed. errors.Is matches its nvml.Return,
// e.g. errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED).
type InitError struct {
	// Library is the path of the library that was loaded.
	Library string
	Return  nvml.Return
	// LoadError is the dynamic loader's reason when the library did not load.
	LoadError error
}

func (e *InitError) Error() string {
	reason := nvml.ErrorString(e.Return)
	if e.LoadError != nil {
		reason += " (" + e.LoadError.Error() + ")"
	}
	return fmt.Sprintf("initializing NVML from %s failed: %s: %s", e.Library, reason, initHint(e.Return))
}

func (e *InitError) Unwrap() error { return e.Return }

func initHint(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "the library could not be loaded; check that the file is intact, built for this CPU architecture, " +
			"and that --nvidia-driver-root points at a complete driver installation"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA kernel module is not loaded on this node; install the driver (or wait for the GPU Operator's driver) " +
			"and check that nvidia-smi works on the host"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to open the /dev/nvidia* device nodes; run the plugin as a privileged container or grant it access to them"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "the library does not match the version of the loaded kernel module; point --nvidia-driver-root at the driver " +
			"that is loaded, or reboot the node to finish a driver upgrade"
	}
	return "check the driver installation (nvidia-smi on the host) and the kernel log for NVIDIA errors, " + noGPUHint
}
