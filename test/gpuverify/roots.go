package gpuverify

import (
	"context"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/test/images"
)

// NvcdiEdits is the plugin's EditsFunc (internal/plugin.GPUNode.Edits): NVIDIA's
// nvcdi over NVML and the roots, with the nvidia-cdi-hook of
// --nvidia-cdi-hook-path (see DefaultHookPath; empty: nvcdi's default,
// /usr/bin/nvidia-cdi-hook).
func NvcdiEdits(r nvmllib.Roots, hookPath string) EditsFunc {
	return func(ctx context.Context, lib nvml.Interface, _ *model.Node) (cdi.EditsProvider, error) {
		return cdi.NewNvcdiEdits(ctx, lib, cdi.OptionsFor(r, hookPath))
	}
}

// DefaultHookPath is the hook of a run: flag when set, else the
// nvidia-cdi-hook next to the kit's own program (make gpu-verify builds it
// there, as the gpudra image carries one that the plugin installs), else ""
// (nvcdi's default).
func DefaultHookPath(flag string) string {
	if flag != "" {
		return flag
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), images.CDIHookBinary)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
		return p
	}
	return ""
}

// ForDriverRoot is the Config of a run on this machine with
// --nvidia-driver-root=driverRoot and --nvidia-cdi-hook-path=hookPath:
// NVML and the CDI edits as gpu-kubelet-plugin gets them (internal/plugin.OpenNode
// and GPUNode.Edits). The caller sets the names and times.
func ForDriverRoot(driverRoot, hookPath string) Config {
	// The kit runs on the host: the host sees the root where the kit does.
	r := nvmllib.DriverRoots(driverRoot, "")
	library, err := nvmllib.FindLibrary(r.Driver) // not found: the first check says why
	var footprint FootprintFunc
	if err == nil {
		footprint = SelfFootprint(library)
	}
	return Config{
		Footprint:  footprint,
		Open:       func() (nvml.Interface, error) { return nvmllib.New(r.Driver) },
		Library:    library,
		Edits:      NvcdiEdits(r, hookPath),
		DriverRoot: r.Driver,
		SysfsRoot:  r.Sys,
		Roots:      &r,
	}
}
