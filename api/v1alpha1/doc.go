// Package v1alpha1 is version v1alpha1 of the resource.gpudra.io API group.
//
// It defines GpuClaimParameters, the opaque configuration that users attach
// to ResourceClaims and DeviceClasses for devices of the gpu.gpudra.io driver
// (spec.devices.config[].opaque.parameters), and ComputeDomain, the
// namespaced custom resource for multi-node NVLink (IMEX) domains whose
// CustomResourceDefinition the Helm chart installs. For each the package
// offers strict decoding from JSON or YAML, defaulting, validation and
// encoding, so that the kubelet plugin, the webhook and the CRD's schema
// agree on what a given object means.
//
// zz_generated.deepcopy.go is generated (go generate, make generate) from the
// deepcopy-gen markers below and on the types; make verify-generate fails
// when it is stale.
//
// +k8s:deepcopy-gen=package
package v1alpha1

//go:generate go run k8s.io/code-generator/cmd/deepcopy-gen@v0.37.2 --go-header-file /dev/null --output-file zz_generated.deepcopy.go .

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// GroupName is the API group of the configuration types.
	GroupName = "resource.gpudra.io"
	// Version is the API version implemented by this package.
	Version = "v1alpha1"
	// APIVersion is the value the apiVersion field must have.
	APIVersion = GroupName + "/" + Version
	// Kind is the kind of GpuClaimParameters objects (ComputeDomainKind is
	// the other kind of the group).
	Kind = "GpuClaimParameters"

	// DriverName is the DRA driver name under which GPUs are published and
	// which opaque configurations must name to be handed to this driver.
	DriverName = "gpu.gpudra.io"

	// MaxParametersSize is the largest raw parameters blob Decode accepts. It
	// matches the limit the Kubernetes API enforces on opaque parameters.
	MaxParametersSize = resourceapi.OpaqueParametersMaxLength
)

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// AddToScheme registers the types of this package with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GpuClaimParameters{}, &ComputeDomain{}, &ComputeDomainList{})
	return nil
}
