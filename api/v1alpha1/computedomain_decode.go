package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MaxComputeDomainSize is the largest manifest DecodeComputeDomain accepts:
// the API server's limit on a request body.
const MaxComputeDomainSize = 3 << 20

// DecodeComputeDomain reads a ComputeDomain given as JSON or YAML. It
// requires apiVersion resource.gpudra.io/v1alpha1 and kind ComputeDomain,
// rejects unknown and duplicate fields (in metadata too) and inputs larger
// than MaxComputeDomainSize, then applies SetComputeDomainDefaults and
// ValidateComputeDomain (spec and status). The returned object is defaulted
// and valid; every error is a *DecodeError of Kind ComputeDomain.
func DecodeComputeDomain(raw []byte) (*ComputeDomain, error) {
	fail := func(err error) (*ComputeDomain, error) {
		return nil, &DecodeError{Kind: ComputeDomainKind, Err: err}
	}
	if len(raw) > MaxComputeDomainSize {
		return fail(fmt.Errorf("the manifest is %d bytes, more than the %d bytes the API server accepts", len(raw), MaxComputeDomainSize))
	}
	data, err := toJSONObject(raw, "ComputeDomain manifests", ComputeDomainKind)
	if err != nil {
		return fail(err)
	}
	if errs := checkTypeMeta(data, ComputeDomainKind); len(errs) > 0 {
		return nil, &DecodeError{Kind: ComputeDomainKind, Errs: errs}
	}
	cd := &ComputeDomain{}
	if _, _, err := strictJSON.Decode(data, nil, cd); err != nil {
		return fail(err)
	}
	SetComputeDomainDefaults(cd)
	if errs := ValidateComputeDomain(cd); len(errs) > 0 {
		return nil, &DecodeError{Kind: ComputeDomainKind, Errs: errs}
	}
	return cd, nil
}

// EncodeComputeDomain returns cd as JSON with apiVersion and kind set, as
// DecodeComputeDomain accepts it. cd itself is not modified and is encoded
// as is, without defaulting.
func EncodeComputeDomain(cd *ComputeDomain) ([]byte, error) {
	if cd == nil {
		return nil, errors.New("cannot encode a nil " + ComputeDomainKind)
	}
	c := cd.DeepCopy()
	c.APIVersion = APIVersion
	c.Kind = ComputeDomainKind
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", ComputeDomainKind, c.Name, err)
	}
	return data, nil
}
