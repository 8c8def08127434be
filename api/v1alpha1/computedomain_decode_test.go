package v1alpha1

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
)

const cdYAML = `apiVersion: resource.gpudra.io/v1alpha1
kind: ComputeDomain
metadata:
  name: cd
  namespace: default
spec:
  numNodes: 2
  channel:
    resourceClaimTemplate:
      name: channels
`

func TestDecodeComputeDomain(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *ComputeDomain
	}{
		{name: "YAML, defaults filled in", in: cdYAML, want: domain()},
		{name: "JSON with all channels and a status", in: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain",
			"metadata":{"name":"cd","namespace":"default"},
			"spec":{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"channels"},"allocationMode":"All"}},
			"status":{"status":"Ready","nodes":[{"name":"n1","ipAddress":"10.0.0.1","cliqueID":"c.1","index":0}]}}`,
			want: domain(func(cd *ComputeDomain) {
				cd.Spec.Channel.AllocationMode = AllChannels
				cd.Status = ComputeDomainStatus{Status: DomainReady, Nodes: []ComputeDomainNode{node("n1", "10.0.0.1", "c.1", 0, DomainNotReady)}}
			})},
		{name: "numNodes left out", in: strings.Replace(cdYAML, "  numNodes: 2\n", "", 1),
			want: domain(func(cd *ComputeDomain) { cd.Spec.NumNodes = 0 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeComputeDomain([]byte(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)

			data, err := EncodeComputeDomain(got)
			require.NoError(t, err)
			again, err := DecodeComputeDomain(data)
			require.NoError(t, err, "%s", data)
			assert.Equal(t, got, again, "round trip")
		})
	}
}

func TestDecodeComputeDomainInvalid(t *testing.T) {
	spec := func(s string) string {
		return `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain","metadata":{"name":"cd"},"spec":` + s + `}`
	}
	tests := []struct {
		name   string
		in     string
		want   string // exact message
		strict bool
	}{
		{name: "unknown spec field", in: spec(`{"numNode":2,"channel":{"resourceClaimTemplate":{"name":"c"}}}`),
			want: `invalid ComputeDomain: strict decoding error: unknown field "spec.numNode"`, strict: true},
		{name: "NVIDIA's field names are gpudra's too, but case matters",
			in:   spec(`{"channel":{"resourceClaimTemplate":{"name":"c"},"AllocationMode":"All"}}`),
			want: `invalid ComputeDomain: strict decoding error: unknown field "spec.channel.AllocationMode"`, strict: true},
		{name: "unknown metadata field",
			in:   `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain","metadata":{"nam":"cd"},"spec":{"channel":{"resourceClaimTemplate":{"name":"c"}}}}`,
			want: `invalid ComputeDomain: strict decoding error: unknown field "metadata.nam"`, strict: true},
		{name: "duplicate field", in: spec(`{"numNodes":1,"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"c"}}}`),
			want: `invalid ComputeDomain: strict decoding error: duplicate field "spec.numNodes"`, strict: true},
		{name: "numNodes not a number", in: spec(`{"numNodes":"2","channel":{"resourceClaimTemplate":{"name":"c"}}}`),
			want: `invalid ComputeDomain: json: cannot unmarshal string into Go struct field ComputeDomainSpec.spec.numNodes of type int32`},
		{name: "numNodes beyond int32", in: spec(`{"numNodes":4294967296,"channel":{"resourceClaimTemplate":{"name":"c"}}}`),
			want: `invalid ComputeDomain: json: cannot unmarshal number 4294967296 into Go struct field ComputeDomainSpec.spec.numNodes of type int32`},
		{name: "negative numNodes", in: spec(`{"numNodes":-1,"channel":{"resourceClaimTemplate":{"name":"c"}}}`),
			want: `invalid ComputeDomain: spec.numNodes: Invalid value: -1: must be 0 or more (the number of nodes the workload runs on; 0 leaves it open)`},
		{name: "bad allocation mode", in: spec(`{"channel":{"resourceClaimTemplate":{"name":"c"},"allocationMode":"Some"}}`),
			want: `invalid ComputeDomain: spec.channel.allocationMode: Unsupported value: "Some": supported values: "Single", "All"`},
		{name: "no spec", in: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain","metadata":{"name":"cd"}}`,
			want: `invalid ComputeDomain: spec.channel: Required value: set channel.resourceClaimTemplate.name: the ResourceClaimTemplate through which the workload's pods claim IMEX channels`},
		{name: "NVIDIA's group is not gpudra's",
			in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomain","spec":{"channel":{"resourceClaimTemplate":{"name":"c"}}}}`,
			want: `invalid ComputeDomain: apiVersion: Unsupported value: "resource.nvidia.com/v1beta1": ` +
				`supported values: "resource.gpudra.io/v1alpha1"`},
		{name: "the other kind of the group", in: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters"}`,
			want: `invalid ComputeDomain: kind: Unsupported value: "GpuClaimParameters": supported values: "ComputeDomain"`},
		{name: "empty", in: " \n", want: `invalid ComputeDomain: ComputeDomain manifests are empty; expected an object with ` +
			`apiVersion "resource.gpudra.io/v1alpha1" and kind "ComputeDomain"`},
		{name: "a list", in: "- a\n", want: `invalid ComputeDomain: ComputeDomain manifests must be an object with ` +
			`apiVersion "resource.gpudra.io/v1alpha1" and kind "ComputeDomain", not a list`},
		{name: "too large", in: cdYAML + "#" + strings.Repeat("x", MaxComputeDomainSize-len(cdYAML)),
			want: `invalid ComputeDomain: the manifest is 3145729 bytes, more than the 3145728 bytes the API server accepts`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeComputeDomain([]byte(tt.in))
			require.Error(t, err)
			assert.Nil(t, got)
			assert.Equal(t, tt.want, err.Error())
			var de *DecodeError
			require.True(t, errors.As(err, &de), "%T", err)
			assert.Equal(t, ComputeDomainKind, de.Kind)
			assert.Equal(t, tt.strict, runtime.IsStrictDecodingError(errors.Unwrap(err)), "strict decoding error")
		})
	}
}

func TestEncodeComputeDomain(t *testing.T) {
	_, err := EncodeComputeDomain(nil)
	require.EqualError(t, err, "cannot encode a nil ComputeDomain")

	cd := domain()
	cd.APIVersion, cd.Kind = "", ""
	data, err := EncodeComputeDomain(cd)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"apiVersion":"resource.gpudra.io/v1alpha1"`)
	assert.Contains(t, string(data), `"kind":"ComputeDomain"`)
	assert.Empty(t, cd.Kind, "the object passed in is not modified")
}
