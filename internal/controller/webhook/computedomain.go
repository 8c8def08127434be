package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// isComputeDomain reports whether a request's kind is a ComputeDomain of a
// group and version the names serve.
func isComputeDomain(names compat.Names, kind metav1.GroupVersionKind) bool {
	if kind.Kind != KindComputeDomain {
		return false
	}
	for _, gv := range names.ComputeDomainVersions() {
		if gv.Group == kind.Group && gv.Version == kind.Version {
			return true
		}
	}
	return false
}

// domainObject is what the webhook reads of a ComputeDomain: its type, its
// name and its spec, kept raw for the strict decoder. Metadata and status
// are not checked: the API server validates metadata, and status is
// neither set at creation nor changed through the main resource.
type domainObject struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   objectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
}

func readDomain(raw []byte) (*domainObject, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("the request carries no object")
	}
	var o domainObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return &o, nil
}

// decode decodes the object's type and spec strictly.
func (o *domainObject) decode(names compat.Names) (*v1alpha1.ComputeDomain, error) {
	data, err := json.Marshal(domainObject{APIVersion: o.APIVersion, Kind: o.Kind, Spec: o.Spec})
	if err != nil {
		return nil, fmt.Errorf("re-encode the ComputeDomain's spec: %w", err)
	}
	return names.DecodeComputeDomain(data)
}

// reviewComputeDomain returns the reason to deny a ComputeDomain create or
// update, or "" to allow it. At creation the spec must be valid. An update
// that leaves the spec as it was is allowed even if the object predates the
// webhook and is invalid, so that finalizers can always be removed; one that
// changes it is refused, since numNodes and channel are fixed at creation.
func reviewComputeDomain(names compat.Names, req *admissionv1.AdmissionRequest) (string, error) {
	obj, err := readDomain(req.Object.Raw)
	if err != nil {
		return "", fmt.Errorf("cannot read the %s %s: %w", KindComputeDomain, displayName(req, ""), err)
	}
	name := KindComputeDomain + " " + displayName(req, nameOf(obj.Metadata))
	var old *domainObject
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old, err = readDomain(req.OldObject.Raw)
		if err == nil && bytes.Equal(old.Spec, obj.Spec) {
			return "", nil
		}
	}
	cd, err := obj.decode(names)
	if err != nil {
		return fmt.Sprintf("%s: %v", name, err), nil
	}
	if req.Operation != admissionv1.Update {
		return "", nil
	}
	if old == nil {
		// No readable old object to compare with (the API server always
		// sends one); the new spec is valid, and the CRD's transition
		// rule still guards the spec.
		return "", nil
	}
	oldCD, err := old.decode(names)
	if err != nil {
		return fmt.Sprintf("%s: spec: immutable: numNodes and channel cannot change after the ComputeDomain is created "+
			"(the stored spec, which is invalid, differs); delete the ComputeDomain and create it again", name), nil
	}
	if errs := v1alpha1.ValidateComputeDomainUpdate(cd, oldCD); len(errs) > 0 {
		return fmt.Sprintf("%s: %v", name, errs.ToAggregate()), nil
	}
	return "", nil
}
