package v1alpha1

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzDecode checks that Decode never panics, that it returns a valid object
// or a *DecodeError, and that what it accepts survives an Encode/Decode
// round trip unchanged. Seeds live in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(header + `}`))
	f.Add([]byte("apiVersion: resource.gpudra.io/v1alpha1\nkind: GpuClaimParameters\nsharing:\n  strategy: TimeSlicing\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := Decode(raw)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error is not a *DecodeError: %T %v", err, err)
			}
			if p != nil {
				t.Fatalf("object returned together with error %v", err)
			}
			return
		}
		if errs := Validate(p); len(errs) > 0 {
			t.Fatalf("accepted object is invalid: %v", errs)
		}
		data, err := Encode(p)
		if err != nil {
			t.Fatalf("cannot encode accepted object: %v", err)
		}
		again, err := Decode(data)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", data, err)
		}
		// Semantic: quantities compare by value ("1.5Gi" re-encodes as "1536Mi").
		if !equality.Semantic.DeepEqual(p, again) {
			t.Fatalf("round trip changed the object: %#v became %#v", p, again)
		}
	})
}

// FuzzDecodeComputeDomain is FuzzDecode for ComputeDomain manifests: no
// panic, a valid object or a *DecodeError of kind ComputeDomain, and an
// Encode/Decode round trip that changes nothing. Seeds live in
// testdata/fuzz/FuzzDecodeComputeDomain.
func FuzzDecodeComputeDomain(f *testing.F) {
	f.Add([]byte(cdYAML))
	f.Add([]byte(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain","metadata":{"name":"a"},` +
		`"spec":{"channel":{"resourceClaimTemplate":{"name":"c"},"allocationMode":"All"}},` +
		`"status":{"status":"Ready","nodes":[{"name":"n","ipAddress":"::1","cliqueID":"x.1","index":3,"status":"Ready"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		cd, err := DecodeComputeDomain(raw)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Kind != ComputeDomainKind {
				t.Fatalf("error is not a *DecodeError of kind ComputeDomain: %T %v", err, err)
			}
			if cd != nil {
				t.Fatalf("object returned together with error %v", err)
			}
			return
		}
		if errs := ValidateComputeDomain(cd); len(errs) > 0 {
			t.Fatalf("accepted object is invalid: %v", errs)
		}
		data, err := EncodeComputeDomain(cd)
		if err != nil {
			t.Fatalf("cannot encode accepted object: %v", err)
		}
		again, err := DecodeComputeDomain(data)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", data, err)
		}
		if !equality.Semantic.DeepEqual(cd, again) {
			t.Fatalf("round trip changed the object: %#v became %#v", cd, again)
		}
	})
}
