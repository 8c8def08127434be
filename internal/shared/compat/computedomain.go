package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// NVIDIAComputeDomains is the group and version of NVIDIA's ComputeDomain
// custom resource, which the NVIDIA mode serves besides gpudra's.
var NVIDIAComputeDomains = schema.GroupVersion{Group: "resource.nvidia.com", Version: "v1beta1"}

// ComputeDomainVersions returns the groups and versions whose ComputeDomains
// the names serve: gpudra's resource.gpudra.io/v1alpha1, and in the NVIDIA
// mode NVIDIA's resource.nvidia.com/v1beta1 too (first).
func (n Names) ComputeDomainVersions() []schema.GroupVersion {
	if n.Mode == NVIDIA {
		return []schema.GroupVersion{NVIDIAComputeDomains, v1alpha1.SchemeGroupVersion}
	}
	return []schema.GroupVersion{v1alpha1.SchemeGroupVersion}
}

// NVIDIA's ComputeDomain as its CRD and Go types define it (field names,
// JSON types, optional fields). Its field names are gpudra's too; the
// shapes differ in the integer types (int there, int32 in v1alpha1) and in
// nodes being pointers, so the conversion checks ranges and null entries.
type nvComputeDomain struct {
	nvTypeMeta `json:",inline"`
	Metadata   metav1.ObjectMeta     `json:"metadata,omitempty"`
	Spec       nvComputeDomainSpec   `json:"spec"`
	Status     nvComputeDomainStatus `json:"status,omitempty"`
}

type nvComputeDomainSpec struct {
	NumNodes int        `json:"numNodes,omitempty"`
	Channel  *nvChannel `json:"channel"`
}

type nvChannel struct {
	ResourceClaimTemplate struct {
		Name string `json:"name"`
	} `json:"resourceClaimTemplate"`
	AllocationMode string `json:"allocationMode,omitempty"`
}

type nvComputeDomainStatus struct {
	Status string    `json:"status"`
	Nodes  []*nvNode `json:"nodes,omitempty"`
}

type nvNode struct {
	Name      string `json:"name"`
	IPAddress string `json:"ipAddress"`
	CliqueID  string `json:"cliqueID"`
	Index     int    `json:"index"`
	Status    string `json:"status,omitempty"`
}

// DecodeComputeDomain reads a ComputeDomain manifest (JSON or YAML) of a
// group the names serve (ComputeDomainVersions) into gpudra's type,
// defaulted and valid. Natively that is v1alpha1.DecodeComputeDomain. In
// the NVIDIA mode NVIDIA's resource.nvidia.com/v1beta1 ComputeDomain is
// read too, strictly and case-sensitively with its own field names, and
// checked as gpudra's; the result carries gpudra's apiVersion. Errors are
// a *v1alpha1.DecodeError for gpudra's group, else a *ConfigError of Kind
// ComputeDomain.
func (n Names) DecodeComputeDomain(raw []byte) (*v1alpha1.ComputeDomain, error) {
	if n.Mode != NVIDIA {
		return v1alpha1.DecodeComputeDomain(raw)
	}
	const kind = v1alpha1.ComputeDomainKind
	nvAPIVersion := NVIDIAComputeDomains.String()
	if len(raw) > v1alpha1.MaxComputeDomainSize {
		return nil, &ConfigError{Kind: kind, Err: fmt.Errorf("the manifest is %d bytes, more than the %d bytes the API server accepts",
			len(raw), v1alpha1.MaxComputeDomainSize)}
	}
	data := bytes.TrimSpace(raw)
	if len(data) == 0 || data[0] != '{' || !json.Valid(data) {
		converted, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			return nil, &ConfigError{Kind: kind, Err: fmt.Errorf("cannot parse the ComputeDomain as JSON or YAML: %w", err)}
		}
		data = bytes.TrimSpace(converted)
	}
	var tm nvTypeMeta
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &tm) != nil {
		return nil, &ConfigError{Kind: kind, Err: fmt.Errorf("a ComputeDomain must be an object with apiVersion %q or %q and kind %q",
			nvAPIVersion, v1alpha1.APIVersion, kind)}
	}
	switch tm.APIVersion {
	case v1alpha1.APIVersion:
		return v1alpha1.DecodeComputeDomain(raw)
	case nvAPIVersion:
	default:
		return nil, &ConfigError{Kind: kind, Errs: field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), tm.APIVersion,
			[]string{nvAPIVersion, v1alpha1.APIVersion})}}
	}
	if tm.Kind != kind {
		return nil, &ConfigError{Kind: kind, Errs: field.ErrorList{field.NotSupported(field.NewPath("kind"), tm.Kind, []string{kind})}}
	}
	var nv nvComputeDomain
	if err := strict(data, &nv); err != nil {
		return nil, &ConfigError{Kind: kind, Err: err}
	}
	cd, errs := nv.convert()
	if len(errs) > 0 {
		return nil, &ConfigError{Kind: kind, Errs: errs}
	}
	v1alpha1.SetComputeDomainDefaults(cd)
	if errs := v1alpha1.ValidateComputeDomain(cd); len(errs) > 0 {
		return nil, &ConfigError{Kind: kind, Errs: errs}
	}
	return cd, nil
}

// convert maps NVIDIA's ComputeDomain onto gpudra's field by field; it
// reports the values gpudra's type cannot hold (integers beyond int32, null
// nodes). The rest is checked by v1alpha1.ValidateComputeDomain.
func (nv *nvComputeDomain) convert() (*v1alpha1.ComputeDomain, field.ErrorList) {
	var errs field.ErrorList
	cd := &v1alpha1.ComputeDomain{ObjectMeta: nv.Metadata}
	cd.APIVersion, cd.Kind = v1alpha1.APIVersion, v1alpha1.ComputeDomainKind
	var ok bool
	if cd.Spec.NumNodes, ok = toInt32(nv.Spec.NumNodes); !ok {
		errs = append(errs, field.Invalid(field.NewPath("spec", "numNodes"), nv.Spec.NumNodes, "must be between 0 and 2147483647"))
	}
	if c := nv.Spec.Channel; c != nil {
		cd.Spec.Channel = &v1alpha1.ComputeDomainChannel{
			ResourceClaimTemplate: v1alpha1.ChannelClaimTemplate{Name: c.ResourceClaimTemplate.Name},
			AllocationMode:        v1alpha1.ChannelAllocationMode(c.AllocationMode),
		}
	}
	cd.Status.Status = v1alpha1.ComputeDomainState(nv.Status.Status)
	for i, node := range nv.Status.Nodes {
		path := field.NewPath("status", "nodes").Index(i)
		if node == nil {
			errs = append(errs, field.Required(path, "a node entry, not null"))
			continue
		}
		index, ok := toInt32(node.Index)
		if !ok {
			errs = append(errs, field.Invalid(path.Child("index"), node.Index, "must be between 0 and 2147483647"))
		}
		cd.Status.Nodes = append(cd.Status.Nodes, v1alpha1.ComputeDomainNode{Name: node.Name, IPAddress: node.IPAddress,
			CliqueID: node.CliqueID, Index: index, Status: v1alpha1.ComputeDomainState(node.Status)})
	}
	return cd, errs
}

// toInt32 converts v when it fits; a negative v that fits is left for
// validation to report in gpudra's words.
func toInt32(v int) (int32, bool) {
	if v > math.MaxInt32 || v < math.MinInt32 {
		return 0, false
	}
	return int32(v), true
}
