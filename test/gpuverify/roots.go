package gpuverify

import (
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/pkg/cdi"
	"github.com/gpudra/gpudra/pkg/model"
	"github.com/gpudra/gpudra/pkg/nvmllib"
)

// Roots says where the driver's files, its device nodes and the sysfs of its
// GPUs are, by the rule of gpu-kubelet-plugin (pkg/plugin/roots.go, which is
// unexported): a driver root that has dev/nvidiactl (sys/bus/pci/devices)
// holds the device nodes (sysfs), otherwise the machine's own do. The kit
// runs on the host, so the host sees every root where the kit does
// (--host-driver-root of the plugin is the driver root).
type Roots struct {
	Driver, Dev, Sys string
}

// RootsOf applies the plugin's rule to driverRoot ("/" when empty).
func RootsOf(driverRoot string) Roots {
	r := Roots{Driver: filepath.Clean(driverRoot), Dev: "/", Sys: "/sys"}
	if driverRoot == "" {
		r.Driver = "/"
	}
	if r.Driver == "/" {
		return r
	}
	if exists(filepath.Join(r.Driver, "dev", "nvidiactl")) {
		r.Dev = r.Driver
	}
	if exists(filepath.Join(r.Driver, "sys", "bus", "pci", "devices")) {
		r.Sys = filepath.Join(r.Driver, "sys")
	}
	return r
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// NvcdiEdits is the plugin's EditsFunc (pkg/plugin.GPUNode.Edits): NVIDIA's
// nvcdi over NVML and the roots, with the nvidia-cdi-hook of
// --nvidia-cdi-hook-path (empty: nvcdi's default, /usr/bin/nvidia-cdi-hook).
func NvcdiEdits(r Roots, hookPath string) EditsFunc {
	return func(lib nvml.Interface, _ *model.Node) (cdi.EditsProvider, error) {
		return cdi.NewNvcdiEdits(lib, cdi.NvcdiOptions{DriverRoot: r.Driver, HostDriverRoot: r.Driver,
			DevRoot: r.Dev, HostDevRoot: r.Dev, HookPath: hookPath})
	}
}

// ForDriverRoot is the Config of a run on this machine with
// --nvidia-driver-root=driverRoot and --nvidia-cdi-hook-path=hookPath:
// NVML and the CDI edits as gpu-kubelet-plugin gets them (pkg/plugin.OpenNode
// and GPUNode.Edits). The caller sets the names and times.
func ForDriverRoot(driverRoot, hookPath string) Config {
	r := RootsOf(driverRoot)
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
