package cdi

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
)

// NvcdiEdits asks NVIDIA's nvcdi library (nvidia-container-toolkit) for the
// edits of a real node: device nodes, driver libraries, binaries and hooks
// found under the driver root. The plugin may see the driver root at another
// path than the host does (the chart mounts it at /driver-root); the edits
// name host paths, since the container runtime resolves them on the host.
type NvcdiEdits struct {
	lib     nvcdi.Interface
	toHost  []transform.Transformer
	devRoot string
}

// NvcdiOptions configure NewNvcdiEdits.
type NvcdiOptions struct {
	// DriverRoot is where the driver is installed, as this process sees it.
	DriverRoot string
	// HostDriverRoot is the same directory as the host sees it; defaults to DriverRoot.
	HostDriverRoot string
	// DevRoot is the root of the dev/nvidia* nodes as this process sees it; defaults to DriverRoot.
	DevRoot string
	// HostDevRoot is the same directory as the host sees it; defaults to DevRoot.
	HostDevRoot string
	// HookPath is the host path of nvidia-cdi-hook used by the generated hooks.
	HookPath string
}

// OptionsFor are the options for a driver root's layout (see
// nvmllib.DriverRoots) and the host path of nvidia-cdi-hook.
func OptionsFor(r nvmllib.Roots, hookPath string) NvcdiOptions {
	return NvcdiOptions{DriverRoot: r.Driver, HostDriverRoot: r.HostDriver, DevRoot: r.Dev, HostDevRoot: r.HostDev, HookPath: hookPath}
}

// NewNvcdiEdits creates the real-node provider on top of an initialized NVML.
// nvcdi logs through ctx's klog logger (see nvcdiLogger), also when the
// provider is used later.
func NewNvcdiEdits(ctx context.Context, lib nvml.Interface, opts NvcdiOptions) (*NvcdiEdits, error) {
	devRoot := opts.DevRoot
	if devRoot == "" {
		devRoot = opts.DriverRoot
	}
	nopts := []nvcdi.Option{
		nvcdi.WithLogger(nvcdiLogger(klog.FromContext(ctx))),
		nvcdi.WithNvmlLib(lib),
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithDriverRoot(opts.DriverRoot),
		nvcdi.WithDevRoot(devRoot),
		// As NVIDIA's DRA driver does ("fixes device injection"): without
		// the flag nvcdi loads the driver root's libnvidia-sandboxutils and
		// lets it pick the device nodes and files instead of its own
		// discovery.
		nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
	}
	if opts.HookPath != "" {
		nopts = append(nopts, nvcdi.WithNVIDIACDIHookPath(opts.HookPath))
	}
	l, err := nvcdi.New(nopts...)
	if err != nil {
		return nil, fmt.Errorf("create nvcdi library (driver root %q): %w", opts.DriverRoot, err)
	}
	n := &NvcdiEdits{lib: l, devRoot: devRoot}
	n.toHost = append(n.toHost, hostRoot(opts.DriverRoot, opts.HostDriverRoot))
	if devRoot != opts.DriverRoot {
		n.toHost = append(n.toHost, hostRoot(devRoot, opts.HostDevRoot))
	}
	return n, nil
}

// hostRoot rewrites host paths under seen (as this process sees the
// directory) to host (as the host sees it); empty host means the same.
func hostRoot(seen, host string) transform.Transformer {
	if host == "" {
		host = seen
	}
	return root.New(root.WithRoot(seen), root.WithTargetRoot(host), root.WithRelativeTo("host"))
}

// onHost applies the host-path transforms to edits.
func (n *NvcdiEdits) onHost(e *cdispec.ContainerEdits) (*cdispec.ContainerEdits, error) {
	spec := &cdispec.Spec{ContainerEdits: *e}
	for _, t := range n.toHost {
		if err := t.Transform(spec); err != nil {
			return nil, fmt.Errorf("rewrite the driver root's paths to host paths: %w", err)
		}
	}
	return &spec.ContainerEdits, nil
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
	return n.onHost(e.ContainerEdits)
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
	return n.onHost(&e)
}
