package compat

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// VfioDeviceConfigKind is NVIDIA's configuration of a vfio (passthrough)
// device; read when passthrough is on.
const VfioDeviceConfigKind = "VfioDeviceConfig"

// NVIDIA's IOMMU backend policies (VfioDeviceConfig iommu.backendPolicy).
const (
	IOMMULegacyOnly    = "LegacyOnly"
	IOMMUPreferIommuFD = "PreferIommuFD"
)

// VFIODevice: NVIDIA's VfioDeviceConfig applies to vfio devices only.
const VFIODevice DeviceKind = "vfio"

// VFIOConfig is what a VfioDeviceConfig asks of a vfio device.
type VFIOConfig struct {
	// APIDevice: also give the container the IOMMU API device
	// (/dev/vfio/vfio for the legacy backend, /dev/iommu for iommufd). Off
	// by default, as NVIDIA's.
	APIDevice bool
	// PreferIOMMUFD is backendPolicy PreferIommuFD: the iommufd backend
	// (the GPU's /dev/vfio/devices/vfio<N>) where the node has /dev/iommu,
	// the legacy one elsewhere, as NVIDIA's driver does.
	PreferIOMMUFD bool
}

type nvVfioDeviceConfig struct {
	nvTypeMeta `json:",inline"`
	Iommu      *nvIOMMU `json:"iommu,omitempty"`
}

type nvIOMMU struct {
	BackendPolicy   string `json:"backendPolicy"`
	EnableAPIDevice *bool  `json:"enableAPIDevice,omitempty"`
}

// passthroughOff explains a VfioDeviceConfig on a driver without passthrough.
const passthroughOff = "GPU passthrough to virtual machines (VFIO) is off on this driver; " +
	"install it with kubeletPlugin.passthrough=true (--passthrough of the kubelet plugin and the controller) " +
	"and request a device of the vfio DeviceClass"

// decodeVfio reads a VfioDeviceConfig strictly: NVIDIA's defaults (legacy
// backend, no API device) for what is left out, an unknown backend policy
// refused.
func (n Names) decodeVfio(data []byte) (*Config, error) {
	if !n.Passthrough {
		return nil, &ConfigError{Kind: VfioDeviceConfigKind,
			Err: fmt.Errorf("kind %s is not supported: %s", VfioDeviceConfigKind, passthroughOff)}
	}
	var c nvVfioDeviceConfig
	if err := strict(data, &c); err != nil {
		return nil, &ConfigError{Kind: VfioDeviceConfigKind, Err: err}
	}
	v := &VFIOConfig{}
	if c.Iommu != nil {
		switch c.Iommu.BackendPolicy {
		case "", IOMMULegacyOnly:
		case IOMMUPreferIommuFD:
			v.PreferIOMMUFD = true
		default:
			return nil, &ConfigError{Kind: VfioDeviceConfigKind, Errs: field.ErrorList{field.NotSupported(
				field.NewPath("iommu", "backendPolicy"), c.Iommu.BackendPolicy, []string{IOMMULegacyOnly, IOMMUPreferIommuFD})}}
		}
		v.APIDevice = c.Iommu.EnableAPIDevice != nil && *c.Iommu.EnableAPIDevice
	}
	return &Config{Kind: VfioDeviceConfigKind, For: VFIODevice, Params: v1alpha1.DefaultGpuClaimParameters(), VFIO: v}, nil
}
