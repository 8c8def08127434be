package cdi

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/pkg/model"
)

// NvcdiEdits asks NVIDIA's nvcdi library (nvidia-container-toolkit) for the
// edits of a real node: device nodes, driver libraries, binaries and hooks
// found under the driver root.
type NvcdiEdits struct {
	lib nvcdi.Interface
}

// NvcdiOptions configure NewNvcdiEdits.
type NvcdiOptions struct {
	// DriverRoot is where the driver is installed on the host ("/" or e.g. /run/nvidia/driver).
	DriverRoot string
	// DevRoot is where /dev of the host is visible; defaults to DriverRoot.
	DevRoot string
	// HookPath is the host path of nvidia-cdi-hook used by the generated hooks.
	HookPath string
}

// NewNvcdiEdits creates the real-node provider on top of an initialized NVML.
func NewNvcdiEdits(lib nvml.Interface, opts NvcdiOptions) (*NvcdiEdits, error) {
	devRoot := opts.DevRoot
	if devRoot == "" {
		devRoot = opts.DriverRoot
	}
	nopts := []nvcdi.Option{
		nvcdi.WithNvmlLib(lib),
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithDriverRoot(opts.DriverRoot),
		nvcdi.WithDevRoot(devRoot),
	}
	if opts.HookPath != "" {
		nopts = append(nopts, nvcdi.WithNVIDIACDIHookPath(opts.HookPath))
	}
	l, err := nvcdi.New(nopts...)
	if err != nil {
		return nil, fmt.Errorf("create nvcdi library (driver root %q): %w", opts.DriverRoot, err)
	}
	return &NvcdiEdits{lib: l}, nil
}

// Common implements EditsProvider.
func (n *NvcdiEdits) Common() (*cdispec.ContainerEdits, error) {
	e, err := n.lib.GetCommonEdits()
	if err != nil {
		return nil, fmt.Errorf("discover driver libraries and control devices with nvcdi: %w", err)
	}
	if e == nil || e.ContainerEdits == nil {
		return &cdispec.ContainerEdits{}, nil
	}
	return e.ContainerEdits, nil
}

// Device implements EditsProvider.
func (n *NvcdiEdits) Device(gpu *model.GPU) (*cdispec.ContainerEdits, error) {
	devs, err := n.lib.GetDeviceSpecsByID(gpu.UUID)
	if err != nil {
		return nil, fmt.Errorf("nvcdi device spec: %w", err)
	}
	if len(devs) != 1 {
		return nil, fmt.Errorf("nvcdi returned %d device specs for %s, expected 1", len(devs), gpu.UUID)
	}
	e := devs[0].ContainerEdits
	return &e, nil
}
