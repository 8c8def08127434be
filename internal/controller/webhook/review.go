package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

const resourceGroup = "resource.k8s.io"

// Kinds the webhook checks.
const (
	KindResourceClaim         = "ResourceClaim"
	KindResourceClaimTemplate = "ResourceClaimTemplate"
	KindDeviceClass           = "DeviceClass"
	// KindComputeDomain, of the groups and versions the driver's names
	// serve (compat.Names.ComputeDomainVersions).
	KindComputeDomain = v1alpha1.ComputeDomainKind
)

// SupportedVersions are the resource.k8s.io versions whose claims, templates
// and classes the webhook understands. In all of them a claim's device spec
// has config[]{requests, opaque{driver, parameters}} and a class has
// spec.config[]{opaque{driver, parameters}}. Objects of other versions are
// allowed unchecked.
var SupportedVersions = []string{"v1", "v1beta2", "v1beta1"}

// objectMeta is the part of the metadata that names the object.
type objectMeta struct {
	Name         string `json:"name"`
	GenerateName string `json:"generateName"`
}

// deviceConfig is one entry of spec.devices.config. Parameters are kept raw
// for v1alpha1.Decode.
type deviceConfig struct {
	Requests []string `json:"requests"`
	Opaque   *struct {
		Driver     string          `json:"driver"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"opaque"`
}

type claimSpec struct {
	Devices struct {
		Config []deviceConfig `json:"config"`
	} `json:"devices"`
}

// claimObject reads a ResourceClaim of any supported version.
type claimObject struct {
	Metadata objectMeta `json:"metadata"`
	Spec     claimSpec  `json:"spec"`
}

// templateObject reads a ResourceClaimTemplate of any supported version.
type templateObject struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Spec claimSpec `json:"spec"`
	} `json:"spec"`
}

// classObject reads a DeviceClass of any supported version. Its configs
// have no requests: they apply to every request that uses the class.
type classObject struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Config []deviceConfig `json:"config"`
	} `json:"spec"`
}

// checked is what the webhook needs from an object under review.
type checked struct {
	name       string
	configPath string
	configs    []deviceConfig
	// class: the configs are a DeviceClass's, which name no requests.
	class bool
}

// review returns the reason to deny req, or "" to allow it. An error means
// the object in the request could not be read.
func review(names compat.Names, req *admissionv1.AdmissionRequest) (string, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return "", nil
	}
	if req.SubResource != "" {
		return "", nil
	}
	if isComputeDomain(names, req.Kind) {
		return reviewComputeDomain(names, req)
	}
	if req.Kind.Group != resourceGroup || !slices.Contains(SupportedVersions, req.Kind.Version) {
		return "", nil
	}
	if !slices.Contains([]string{KindResourceClaim, KindResourceClaimTemplate, KindDeviceClass}, req.Kind.Kind) {
		return "", nil
	}
	obj, err := readObject(req.Kind.Kind, req.Object.Raw)
	if err != nil {
		return "", fmt.Errorf("cannot read the %s %s: %w", req.Kind.Kind, displayName(req, ""), err)
	}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old, err := readObject(req.Kind.Kind, req.OldObject.Raw)
		if err == nil && sameConfigs(old.configs, obj.configs) {
			// Updates that keep the configs (metadata, finalizers) are
			// never blocked, even if the object predates the webhook.
			return "", nil
		}
	}

	var problems []string
	for i, c := range obj.configs {
		if c.Opaque == nil || c.Opaque.Driver != names.Driver {
			continue
		}
		if _, err := names.Decode(c.Opaque.Parameters); err != nil {
			applies := describeRequests(c.Requests)
			if obj.class {
				applies = "every request for this class"
			}
			problems = append(problems, fmt.Sprintf("%s[%d] (%s): %v", obj.configPath, i, applies, err))
		}
	}
	if len(problems) == 0 {
		return "", nil
	}
	return fmt.Sprintf("%s %s: %s", req.Kind.Kind, displayName(req, obj.name), strings.Join(problems, "; ")), nil
}

func readObject(kind string, raw []byte) (*checked, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("the request carries no object")
	}
	switch kind {
	case KindResourceClaim:
		var o claimObject
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, err
		}
		return &checked{name: nameOf(o.Metadata), configPath: "spec.devices.config", configs: o.Spec.Devices.Config}, nil
	case KindDeviceClass:
		var o classObject
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, err
		}
		return &checked{name: nameOf(o.Metadata), configPath: "spec.config", configs: o.Spec.Config, class: true}, nil
	default:
		var o templateObject
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, err
		}
		return &checked{name: nameOf(o.Metadata), configPath: "spec.spec.devices.config", configs: o.Spec.Spec.Devices.Config}, nil
	}
}

// nameOf returns the object's name; objects created with generateName have
// none yet and are shown as "<generateName><generated>".
func nameOf(m objectMeta) string {
	if m.Name == "" && m.GenerateName != "" {
		return m.GenerateName + "<generated>"
	}
	return m.Name
}

// displayName is namespace/name, preferring the name in the object.
func displayName(req *admissionv1.AdmissionRequest, name string) string {
	if name == "" {
		name = req.Name
	}
	if req.Namespace == "" {
		return name
	}
	return req.Namespace + "/" + name
}

func describeRequests(reqs []string) string {
	if len(reqs) == 0 {
		return "all requests"
	}
	return "requests: " + strings.Join(reqs, ", ")
}

// sameConfigs reports whether two config lists are identical. The API server
// serializes the old and the new object the same way, so equal configs have
// equal bytes.
func sameConfigs(a, b []deviceConfig) bool {
	return slices.EqualFunc(a, b, func(x, y deviceConfig) bool {
		if !slices.Equal(x.Requests, y.Requests) || (x.Opaque == nil) != (y.Opaque == nil) {
			return false
		}
		return x.Opaque == nil ||
			(x.Opaque.Driver == y.Opaque.Driver && bytes.Equal(x.Opaque.Parameters, y.Opaque.Parameters))
	})
}
