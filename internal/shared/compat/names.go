// Package compat is the one place that knows the names gpudra publishes
// under: the DRA driver name, the base DeviceClasses, the CDI vendor, the
// domain of the health taints and the opaque configuration API, for gpudra's
// native names and for the NVIDIA compatibility mode (driver gpu.nvidia.com,
// NVIDIA's class names, attribute names and opaque configuration API).
//
// Every program resolves its Names once, from its --compatibility flag (and
// its driver name flag where it has one), with Resolve, and passes them down;
// nothing derives names from a driver name afterwards. The Helm chart's one
// counterpart is the gpudra.driverName helper of its _helpers.tpl.
package compat

import (
	"fmt"
	"strings"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// Mode selects the names and APIs the driver serves.
type Mode string

const (
	// Native is gpudra's own mode: driver gpu.gpudra.io (or any other name
	// given), classes gpu.gpudra.io and mig.gpudra.io, opaque configuration
	// resource.gpudra.io/v1alpha1 GpuClaimParameters.
	Native Mode = ""
	// NVIDIA serves NVIDIA's DRA driver API: driver and class gpu.nvidia.com,
	// class mig.nvidia.com, NVIDIA's attribute names, and opaque
	// configuration resource.nvidia.com/v1beta1 GpuConfig and
	// MigDeviceConfig (gpudra's own GpuClaimParameters are accepted too).
	NVIDIA Mode = "nvidia"
)

// NVIDIADriverName is the driver name of the NVIDIA compatibility mode.
const NVIDIADriverName = "gpu.nvidia.com"

// Flags are the command-line values names are resolved from.
type Flags struct {
	// Compatibility is --compatibility: empty, "none" or "native" for
	// gpudra's names, "nvidia" for the NVIDIA compatibility mode.
	Compatibility string
	// Driver is the program's driver name flag; empty (or gpudra's default
	// name, which gives way to the mode's) for the mode's driver.
	Driver string
	// DriverFlag is how that flag is spelt in error messages; empty for
	// "--driver-name".
	DriverFlag string
	// HealthTaints is the kubelet plugin's --health-taints: empty for the
	// mode's schema, TaintsNVIDIA or TaintsGpudra.
	HealthTaints string
	// Passthrough is --passthrough of the kubelet plugin and the controller
	// (chart kubeletPlugin.passthrough): GPUs are also published as vfio
	// devices, the vfio DeviceClass exists and VfioDeviceConfig is read.
	Passthrough bool
}

// The schemas of the health taints (Names.HealthTaints).
const (
	// TaintsNVIDIA publishes NVIDIA's keys and effects, so that tolerations
	// written for NVIDIA's driver match: <driver>/xid=<XID> and
	// <driver>/gpu-lost, both NoSchedule (NVIDIATaintXID, NVIDIATaintGPULost).
	// The default of the NVIDIA mode; not available natively.
	TaintsNVIDIA = "nvidia"
	// TaintsGpudra publishes gpudra's conditions (xid, ecc, lost,
	// recovery-action) in the driver's domain, NoExecute for errors that
	// leave the GPU unusable, so running work is evicted. The native schema;
	// an opt-in in the NVIDIA mode.
	TaintsGpudra = "gpudra"
)

// NVIDIA's health taint keys, as its kubelet plugin (device_health.go)
// publishes them. Its third key, <driver>/unmonitored (effect None, for a
// GPU it cannot watch), has no counterpart: gpudra probes such a GPU.
const (
	NVIDIATaintXID     = NVIDIADriverName + "/xid"
	NVIDIATaintGPULost = NVIDIADriverName + "/gpu-lost"
)

// Names are the names one driver instance publishes and reads.
type Names struct {
	// Mode is the compatibility mode the names belong to.
	Mode Mode
	// Driver is the DRA driver name; also the attribute and capacity
	// domain of its devices, and the domain of its health taints.
	Driver string
	// GPUClass and MIGClass name the base DeviceClasses.
	GPUClass, MIGClass string
	// CDIVendor is the vendor of the per-claim CDI specs.
	CDIVendor string
	// HealthTaints is the schema of the published health taints:
	// TaintsNVIDIA or TaintsGpudra.
	HealthTaints string
	// Passthrough says whether GPU passthrough (the vfio device type) is on.
	Passthrough bool
	// VFIOClass names the DeviceClass of vfio devices; empty when
	// Passthrough is off.
	VFIOClass string
}

// The vfio DeviceClass of each mode (Names.VFIOClass).
const (
	NativeVFIOClass = "vfio.gpu.gpudra.io"
	NVIDIAVFIOClass = "vfio.gpu.nvidia.com"
)

// withPassthrough sets the passthrough names of n from f.
func (n Names) withPassthrough(f Flags) Names {
	n.Passthrough = f.Passthrough
	if !f.Passthrough {
		return n
	}
	n.VFIOClass = NativeVFIOClass
	if n.Mode == NVIDIA {
		n.VFIOClass = NVIDIAVFIOClass
	}
	return n
}

// Resolve returns the names that the flags select. It is the only way from
// flags to names: call it once per program and pass the Names down.
//
// The NVIDIA mode serves gpu.nvidia.com: a driver name other than that or
// gpudra's default is an error. Natively the driver name is the flag's
// (gpudra's default when empty); the name gpu.nvidia.com alone also selects
// the NVIDIA mode, since a driver of that name must speak NVIDIA's API.
func Resolve(f Flags) (Names, error) {
	driverFlag := f.DriverFlag
	if driverFlag == "" {
		driverFlag = "--driver-name"
	}
	var mode Mode
	switch strings.ToLower(strings.TrimSpace(f.Compatibility)) {
	case "", "none", "native":
		mode = Native
	case string(NVIDIA):
		mode = NVIDIA
	default:
		return Names{}, fmt.Errorf("--compatibility=%q is not supported: use \"nvidia\" (NVIDIA's DRA driver names and API) or leave it empty",
			f.Compatibility)
	}
	driver := f.Driver
	if driver == "" {
		driver = v1alpha1.DriverName
	}
	if mode == NVIDIA {
		if driver != v1alpha1.DriverName && driver != NVIDIADriverName {
			return Names{}, fmt.Errorf("%s=%q cannot be used with --compatibility=%s, which serves %s: drop %s",
				driverFlag, driver, mode, NVIDIADriverName, driverFlag)
		}
		driver = NVIDIADriverName
	}
	taints := strings.ToLower(strings.TrimSpace(f.HealthTaints))
	if driver == NVIDIADriverName {
		switch taints {
		case "":
			taints = TaintsNVIDIA
		case TaintsNVIDIA, TaintsGpudra:
		default:
			return Names{}, fmt.Errorf("--health-taints=%q is not supported: use %q (NVIDIA's taint keys and effects, the default) "+
				"or %q (gpudra's, which evict running work from a GPU that became unusable)", f.HealthTaints, TaintsNVIDIA, TaintsGpudra)
		}
		return Names{Mode: NVIDIA, Driver: driver, GPUClass: "gpu.nvidia.com", MIGClass: "mig.nvidia.com",
			CDIVendor: "k8s." + driver, HealthTaints: taints}.withPassthrough(f), nil
	}
	if taints != "" && taints != TaintsGpudra {
		return Names{}, fmt.Errorf("--health-taints=%q needs --compatibility=%s: natively the taints are gpudra's (%q); drop --health-taints",
			f.HealthTaints, NVIDIA, TaintsGpudra)
	}
	return Names{Mode: Native, Driver: driver, GPUClass: "gpu.gpudra.io", MIGClass: "mig.gpudra.io",
		CDIVendor: "k8s." + driver, HealthTaints: TaintsGpudra}.withPassthrough(f), nil
}

// MustResolve is Resolve for flags written in the code (defaults, tests);
// it panics on flags Resolve rejects.
func MustResolve(f Flags) Names {
	n, err := Resolve(f)
	if err != nil {
		panic(err)
	}
	return n
}

// Default returns gpudra's native names (Resolve of no flags).
func Default() Names { return MustResolve(Flags{}) }

// nativeTaintDomain is the domain of the taint keys internal/plugin/health uses.
const nativeTaintDomain = v1alpha1.DriverName + "/"

// TaintKey returns the key a health taint is published under: internal/plugin/health's
// keys (gpu.gpudra.io/<condition>) moved into the driver's domain. Keys of
// other domains are returned unchanged.
func (n Names) TaintKey(key string) string {
	if rest, ok := strings.CutPrefix(key, nativeTaintDomain); ok {
		return n.Driver + "/" + rest
	}
	return key
}

// Attribute qualifies an attribute or capacity name with the driver's
// domain, as CEL expressions and matchAttribute constraints name it.
func (n Names) Attribute(name string) string { return n.Driver + "/" + name }
