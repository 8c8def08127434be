// Package claimconfig works out which GpuClaimParameters apply to each device
// that a ResourceClaim's allocation gives this driver on this node.
//
// It follows the DRA rules for the allocation's combined configuration list:
// a configuration without requests applies to every request, one that names
// a request also applies to that request's subrequests ("req" matches
// "req/sub", as the resource.k8s.io API defines it for prioritized lists, in
// the NVIDIA mode too, where NVIDIA's driver matches names exactly), and one
// that names a subrequest applies to that subrequest only. Configurations from the DeviceClass are applied before those from the
// claim, so the claim's win, and within one source a later entry wins over an
// earlier one. Only opaque configurations for this driver are considered.
package claimconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// DeviceConfig is one allocated device of our driver with its effective
// configuration.
type DeviceConfig struct {
	// Result is a copy of the allocation result for the device.
	Result resourceapi.DeviceRequestAllocationResult
	// Config is the effective configuration: defaulted, valid and never
	// nil. Each DeviceConfig has its own copy.
	Config *v1alpha1.GpuClaimParameters
	// VFIO is the effective VfioDeviceConfig of a vfio (passthrough)
	// device: NVIDIA's defaults when none applies; nil for other devices.
	VFIO *compat.VFIOConfig
}

// sources lists the configuration sources in the order they are applied, so
// that later ones override earlier ones.
var sources = []resourceapi.AllocationConfigSource{
	resourceapi.AllocationConfigSourceClass,
	resourceapi.AllocationConfigSourceClaim,
}

// decodedConfig is one opaque configuration of our driver, decoded.
type decodedConfig struct {
	source   resourceapi.AllocationConfigSource
	requests []string
	params   *v1alpha1.GpuClaimParameters
	// kind and forKind: see compat.Config.
	kind    string
	forKind compat.DeviceKind
	vfio    *compat.VFIOConfig
}

// Resolve returns the devices of claim's allocation that belong to the driver
// names.Driver and poolName (the devices of this node), in allocation order, each with its
// effective configuration. A device that no configuration applies to gets
// v1alpha1.DefaultGpuClaimParameters().
//
// Every opaque configuration for the driver is decoded with names.Decode
// (v1alpha1.Decode natively, NVIDIA's GpuConfig and MigDeviceConfig too in
// the NVIDIA mode), including
// ones that end up overridden, so that mistakes do not go unnoticed. A
// configuration that cannot be decoded fails the whole claim with an error
// that names the claim, the configuration and the requests it targets, and
// wraps the *v1alpha1.DecodeError or *compat.ConfigError. NVIDIA's
// configurations apply to one kind of device (compat.Config.For): one for
// all requests skips devices of the other kind, one that names a request
// fails the claim on a device of the other kind. A claim that is not
// allocated is an error too.
func Resolve(claim *resourceapi.ResourceClaim, names compat.Names, poolName string) ([]DeviceConfig, error) {
	if claim == nil {
		return nil, errors.New("no ResourceClaim given")
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("ResourceClaim %s is not allocated (status.allocation is empty)", claimName(claim))
	}
	devices := claim.Status.Allocation.Devices

	configs, err := decodeConfigs(claim, names)
	if err != nil {
		return nil, err
	}

	var out []DeviceConfig
	for i := range devices.Results {
		result := &devices.Results[i]
		if result.Driver != names.Driver || result.Pool != poolName {
			continue
		}
		var params *v1alpha1.GpuClaimParameters
		var vfio *compat.VFIOConfig
		// The last applicable configuration wins.
		for j := len(configs) - 1; j >= 0; j-- {
			c := configs[j]
			applies, named := appliesTo(c.requests, result.Request)
			if !applies {
				continue
			}
			if c.forKind != compat.AnyDevice && c.forKind != kindOf(result.Device) {
				if !named {
					// NVIDIA's rule: a configuration for all requests
					// skips devices of the other kind. So does one for
					// a main request on a subrequest's device: the
					// claim cannot know which subrequest of a
					// prioritized list is allocated.
					continue
				}
				return nil, fmt.Errorf("ResourceClaim %s: a %s (%s) cannot be applied to device %s of request %q, which is a %s device; "+
					"use %s for it", claimName(claim), c.kind, describeRequests(c.requests), result.Device, result.Request,
					kindOf(result.Device), kindConfig(kindOf(result.Device)))
			}
			params, vfio = c.params, c.vfio
			break
		}
		if params == nil {
			params = v1alpha1.DefaultGpuClaimParameters()
		} else {
			params = params.DeepCopy()
		}
		dc := DeviceConfig{Result: *result.DeepCopy(), Config: params}
		if kindOf(result.Device) == compat.VFIODevice {
			dc.VFIO = &compat.VFIOConfig{}
			if vfio != nil {
				v := *vfio
				dc.VFIO = &v
			}
		}
		out = append(out, dc)
	}
	return out, nil
}

// decodeConfigs decodes the opaque configurations of names.Driver, ordered by
// precedence: class configurations first, then claim configurations, each
// group in list order.
func decodeConfigs(claim *resourceapi.ResourceClaim, names compat.Names) ([]decodedConfig, error) {
	all := claim.Status.Allocation.Devices.Config
	var ours []decodedConfig
	for i := range all {
		c := &all[i]
		if c.Opaque == nil || c.Opaque.Driver != names.Driver {
			continue
		}
		if c.Source != resourceapi.AllocationConfigSourceClass && c.Source != resourceapi.AllocationConfigSourceClaim {
			return nil, fmt.Errorf("ResourceClaim %s: %s has unknown source %q, expected %q or %q",
				claimName(claim), configPath(i), c.Source,
				resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim)
		}
		decoded, err := decodeParameters(names, c.Opaque)
		if err != nil {
			return nil, fmt.Errorf("ResourceClaim %s: opaque parameters in %s (source %s, applies to %s): %w",
				claimName(claim), configPath(i), c.Source, describeRequests(c.Requests), err)
		}
		ours = append(ours, decodedConfig{source: c.Source, requests: c.Requests, params: decoded.Params,
			kind: decoded.Kind, forKind: decoded.For, vfio: decoded.VFIO})
	}

	ordered := make([]decodedConfig, 0, len(ours))
	for _, source := range sources {
		for _, c := range ours {
			if c.source == source {
				ordered = append(ordered, c)
			}
		}
	}
	return ordered, nil
}

// decodeParameters decodes the raw parameters or, for claims built in code
// rather than read from the API server, the object stored in their place.
func decodeParameters(names compat.Names, opaque *resourceapi.OpaqueDeviceConfiguration) (*compat.Config, error) {
	raw := opaque.Parameters.Raw
	if len(raw) == 0 && opaque.Parameters.Object != nil {
		var err error
		if raw, err = json.Marshal(opaque.Parameters.Object); err != nil {
			return nil, fmt.Errorf("cannot encode parameters object: %w", err)
		}
	}
	return names.Decode(raw)
}

// kindOf tells whole GPUs, MIG devices and vfio devices apart by their
// published name.
func kindOf(device string) compat.DeviceKind {
	switch {
	case model.IsMIGDeviceName(device):
		return compat.MIGDevice
	case model.IsVFIODeviceName(device):
		return compat.VFIODevice
	}
	return compat.WholeGPU
}

// kindConfig names the NVIDIA configuration kind for a device kind.
func kindConfig(k compat.DeviceKind) string {
	switch k {
	case compat.MIGDevice:
		return compat.MigDeviceConfigKind
	case compat.VFIODevice:
		return compat.VfioDeviceConfigKind
	}
	return compat.GpuConfigKind
}

// appliesTo reports whether a configuration for the given requests applies
// to the device allocated for request, which is "<request>" or
// "<request>/<subrequest>", and whether it names that request itself (not
// only its main request, nor all requests).
func appliesTo(requests []string, request string) (applies, named bool) {
	if len(requests) == 0 {
		return true, false
	}
	for _, r := range requests {
		if r == request {
			return true, true
		}
	}
	for _, r := range requests {
		// A main request also covers all of its subrequests.
		if !strings.Contains(r, "/") && strings.HasPrefix(request, r+"/") {
			return true, false
		}
	}
	return false, false
}

func claimName(claim *resourceapi.ResourceClaim) string {
	if claim.Namespace == "" {
		return claim.Name
	}
	return claim.Namespace + "/" + claim.Name
}

func configPath(i int) string {
	return fmt.Sprintf("status.allocation.devices.config[%d]", i)
}

func describeRequests(requests []string) string {
	if len(requests) == 0 {
		return "all requests"
	}
	quoted := make([]string, len(requests))
	for i, r := range requests {
		quoted[i] = fmt.Sprintf("%q", r)
	}
	if len(requests) == 1 {
		return "request " + quoted[0]
	}
	return "requests " + strings.Join(quoted, ", ")
}
