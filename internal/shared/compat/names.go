// Package compat is the one place that knows the names gpudra publishes
// under: the DRA driver name, the base DeviceClasses, the CDI vendor and the
// domain of the health taints, for gpudra's native names and for the NVIDIA
// compatibility mode (driver gpu.nvidia.com, NVIDIA's class names, attribute
// names and opaque configuration API). Every component derives its Names from
// the driver name it serves (ForDriver), so the mode follows the one value the
// chart sets.
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

// ParseMode reads the --compatibility flag: empty or "none" for native names,
// "nvidia" for the NVIDIA compatibility mode.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none", "native":
		return Native, nil
	case string(NVIDIA):
		return NVIDIA, nil
	}
	return Native, fmt.Errorf("compatibility mode %q is not supported: use \"nvidia\" (NVIDIA's DRA driver names and API) or leave it empty", s)
}

// DriverFor returns the driver name a mode serves: gpu.nvidia.com in the
// NVIDIA mode, else driverName (gpudra's default when empty). An explicit
// driver name that contradicts the mode is an error.
func DriverFor(mode Mode, driverName string) (string, error) {
	if mode == NVIDIA {
		if driverName != "" && driverName != v1alpha1.DriverName && driverName != NVIDIADriverName {
			return "", fmt.Errorf("driver name %q cannot be used in the %s compatibility mode, which serves %s; drop the driver name",
				driverName, mode, NVIDIADriverName)
		}
		return NVIDIADriverName, nil
	}
	if driverName == "" {
		return v1alpha1.DriverName, nil
	}
	return driverName, nil
}

// Names are the names one driver instance publishes and reads.
type Names struct {
	// Mode is NVIDIA for the driver gpu.nvidia.com, else Native.
	Mode Mode
	// Driver is the DRA driver name; also the attribute and capacity
	// domain of its devices.
	Driver string
	// GPUClass and MIGClass name the base DeviceClasses.
	GPUClass, MIGClass string
	// CDIVendor is the vendor of the per-claim CDI specs.
	CDIVendor string
}

// ForDriver returns the names of the driver called driverName: the NVIDIA
// compatibility names for gpu.nvidia.com, gpudra's names otherwise (with
// driverName as driver name, attribute domain and CDI vendor).
func ForDriver(driverName string) Names {
	if driverName == "" {
		driverName = v1alpha1.DriverName
	}
	if driverName == NVIDIADriverName {
		return Names{Mode: NVIDIA, Driver: driverName, GPUClass: "gpu.nvidia.com", MIGClass: "mig.nvidia.com",
			CDIVendor: "k8s." + driverName}
	}
	return Names{Mode: Native, Driver: driverName, GPUClass: "gpu.gpudra.io", MIGClass: "mig.gpudra.io",
		CDIVendor: "k8s." + driverName}
}

// Default returns gpudra's native names.
func Default() Names { return ForDriver(v1alpha1.DriverName) }

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
