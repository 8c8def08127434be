// Package nvmllib opens the NVML library the plugin discovers GPUs with:
// either the real libnvidia-ml.so.1 of the installed NVIDIA driver, or a
// simulated one built from a profile (package sim), behind the same
// nvml.Interface.
package nvmllib

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/pkg/nvmllib/sim"
)

// Options selects and configures the NVML backend.
type Options struct {
	// DriverRoot is where the NVIDIA driver is installed: "/" (the default)
	// for a driver on the host, /run/nvidia/driver with the GPU Operator.
	DriverRoot string
	// Simulate is a simulation profile name or a path to a profile file.
	// Empty selects the real NVML library.
	Simulate string
	// ProfileDirs are extra directories holding user profiles (<name>.yaml).
	ProfileDirs []string
	// NodeName seeds the simulated UUIDs so that they are stable per node.
	// When empty the host name is used.
	NodeName string
	// SimStateFile, in simulation, keeps the simulated GPUs' MIG state
	// across restarts of the process (see sim.Server.PersistTo).
	SimStateFile string
	// SimStateReadOnly reads SimStateFile but never writes it (inspect).
	SimStateReadOnly bool
}

// New returns an initialized NVML library; the caller must call Shutdown
// when done with it.
func New(opts Options) (nvml.Interface, error) {
	if opts.Simulate != "" {
		return newSimulated(opts)
	}
	return newReal(opts.DriverRoot)
}

func newSimulated(opts Options) (nvml.Interface, error) {
	p, err := sim.Load(opts.Simulate, opts.ProfileDirs)
	if err != nil {
		return nil, err
	}
	node := opts.NodeName
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("simulated NVML needs a node name to derive GPU UUIDs, and the host name is unavailable: %w", err)
		}
	}
	s := sim.NewServer(p, node)
	switch {
	case opts.SimStateFile != "" && opts.SimStateReadOnly:
		if err := s.RestoreFrom(opts.SimStateFile); err != nil {
			return nil, err
		}
	case opts.SimStateFile != "":
		if err := s.PersistTo(opts.SimStateFile); err != nil {
			return nil, err
		}
	}
	if ret := s.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initializing simulated NVML for profile %q: %w", p.Name, ret)
	}
	return s, nil
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
	return "check the driver installation (nvidia-smi on the host) and the kernel log for NVIDIA errors, " +
		"or use --simulate=<profile> to run without GPUs"
}
