package gpuverify

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
)

// NvcdiEdits is the plugin's EditsFunc (internal/plugin.GPUNode.Edits): NVIDIA's
// nvcdi over NVML and the roots, with the nvidia-cdi-hook of
// --nvidia-cdi-hook-path (empty: nvcdi's default, /usr/bin/nvidia-cdi-hook).
func NvcdiEdits(r nvmllib.Roots, hookPath string) EditsFunc {
	return func(ctx context.Context, lib nvml.Interface, _ *model.Node) (cdi.EditsProvider, error) {
		return cdi.NewNvcdiEdits(ctx, lib, cdi.OptionsFor(r, hookPath))
	}
}

// ForDriverRoot is the Config of a run on this machine with
// --nvidia-driver-root=driverRoot and --nvidia-cdi-hook-path=hookPath:
// NVML and the CDI edits as gpu-kubelet-plugin gets them (internal/plugin.OpenNode
// and GPUNode.Edits). The caller sets the names and times.
func ForDriverRoot(driverRoot, hookPath string) Config {
	// The kit runs on the host: the host sees the root where the kit does.
	r := nvmllib.DriverRoots(driverRoot, "")
	library, _ := nvmllib.FindLibrary(r.Driver) // not found: the first check says why
	return Config{
		Open:       func() (nvml.Interface, error) { return nvmllib.New(r.Driver) },
		Library:    library,
		Edits:      NvcdiEdits(r, hookPath),
		DriverRoot: r.Driver,
		SysfsRoot:  r.Sys,
		Roots:      &r,
	}
}
