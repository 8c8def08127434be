package compat

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// nvDomainYAML has the shape of the ComputeDomains in NVIDIA's IMEX demo
// specs (written for this test).
const nvDomainYAML = `apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: bandwidth-test
spec:
  numNodes: 2
  channel:
    resourceClaimTemplate:
      name: bandwidth-test-channel
`

func wantDomain(change func(*v1alpha1.ComputeDomain)) *v1alpha1.ComputeDomain {
	cd := &v1alpha1.ComputeDomain{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.ComputeDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: "bandwidth-test"},
		Spec: v1alpha1.ComputeDomainSpec{NumNodes: 2, Channel: &v1alpha1.ComputeDomainChannel{
			ResourceClaimTemplate: v1alpha1.ChannelClaimTemplate{Name: "bandwidth-test-channel"}, AllocationMode: v1alpha1.SingleChannel}},
		Status: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainNotReady},
	}
	if change != nil {
		change(cd)
	}
	return cd
}

func TestComputeDomainVersions(t *testing.T) {
	assert.Equal(t, []schema.GroupVersion{{Group: "resource.gpudra.io", Version: "v1alpha1"}}, Default().ComputeDomainVersions())
	assert.Equal(t, []schema.GroupVersion{{Group: "resource.nvidia.com", Version: "v1beta1"}, {Group: "resource.gpudra.io", Version: "v1alpha1"}},
		MustResolve(Flags{Compatibility: "nvidia"}).ComputeDomainVersions())
}

func TestDecodeComputeDomainNVIDIA(t *testing.T) {
	const nvPrefix = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomain","metadata":{"name":"bandwidth-test"},`
	tests := []struct {
		name string
		raw  string
		want *v1alpha1.ComputeDomain
		err  string // exact message; "" = accepted
	}{
		{name: "NVIDIA's demo shape", raw: nvDomainYAML, want: wantDomain(nil)},
		{name: "all channels, no numNodes, a status as NVIDIA's daemons write it",
			raw: nvPrefix + `"spec":{"channel":{"resourceClaimTemplate":{"name":"bandwidth-test-channel"},"allocationMode":"All"}},
			"status":{"status":"Ready","nodes":[{"name":"n1","ipAddress":"10.1.0.7","cliqueID":"8a5b.1","index":0,"status":"Ready"},
			{"name":"n2","ipAddress":"10.1.0.8","cliqueID":"8a5b.1","index":1}]}}`,
			want: wantDomain(func(cd *v1alpha1.ComputeDomain) {
				cd.Spec.NumNodes, cd.Spec.Channel.AllocationMode = 0, v1alpha1.AllChannels
				cd.Status = v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainReady, Nodes: []v1alpha1.ComputeDomainNode{
					{Name: "n1", IPAddress: "10.1.0.7", CliqueID: "8a5b.1", Index: 0, Status: v1alpha1.DomainReady},
					{Name: "n2", IPAddress: "10.1.0.8", CliqueID: "8a5b.1", Index: 1, Status: v1alpha1.DomainNotReady}}}
			})},
		{name: "gpudra's group is accepted too",
			raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain","metadata":{"name":"bandwidth-test"},` +
				`"spec":{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"bandwidth-test-channel"}}}}`,
			want: wantDomain(nil)},

		{name: "misspelt field", raw: nvPrefix + `"spec":{"channel":{"resourceClaimTemplate":{"name":"c"},"allocationmode":"All"}}}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: unknown field "spec.channel.allocationmode" ` +
				`(field names are case-sensitive; see NVIDIA's resource.nvidia.com/v1beta1 API)`},
		{name: "bad allocation mode", raw: nvPrefix + `"spec":{"channel":{"resourceClaimTemplate":{"name":"c"},"allocationMode":"Single "}}}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: spec.channel.allocationMode: Unsupported value: "Single ": supported values: "Single", "All"`},
		{name: "negative numNodes", raw: nvPrefix + `"spec":{"numNodes":-2,"channel":{"resourceClaimTemplate":{"name":"c"}}}}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: spec.numNodes: Invalid value: -2: must be 0 or more ` +
				`(the number of nodes the workload runs on; 0 leaves it open)`},
		{name: "numNodes that NVIDIA's int holds and gpudra's int32 does not",
			raw: nvPrefix + `"spec":{"numNodes":3000000000,"channel":{"resourceClaimTemplate":{"name":"c"}}}}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: spec.numNodes: Invalid value: 3000000000: must be between 0 and 2147483647`},
		{name: "template name NVIDIA's schema lets through", raw: nvPrefix + `"spec":{"channel":{"resourceClaimTemplate":{"name":"Channel"}}}}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: spec.channel.resourceClaimTemplate.name: Invalid value: "Channel": ` +
				`a ResourceClaimTemplate name must be a DNS-1123 subdomain: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric ` +
				`characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is ` +
				`'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{name: "no channel", raw: nvPrefix + `"spec":{"numNodes":1}}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: spec.channel: Required value: set channel.resourceClaimTemplate.name: ` +
				`the ResourceClaimTemplate through which the workload's pods claim IMEX channels`},
		{name: "null node", raw: nvPrefix + `"spec":{"channel":{"resourceClaimTemplate":{"name":"c"}}},"status":{"status":"Ready","nodes":[null]}}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: status.nodes[0]: Required value: a node entry, not null`},
		{name: "another kind of NVIDIA's group", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainClique"}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: kind: Unsupported value: "ComputeDomainClique": supported values: "ComputeDomain"`},
		{name: "another version", raw: `{"apiVersion":"resource.nvidia.com/v1beta2","kind":"ComputeDomain"}`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: apiVersion: Unsupported value: "resource.nvidia.com/v1beta2": ` +
				`supported values: "resource.nvidia.com/v1beta1", "resource.gpudra.io/v1alpha1"`},
		{name: "not an object", raw: `[1]`,
			err: `invalid resource.nvidia.com/v1beta1 ComputeDomain: a ComputeDomain must be an object with apiVersion "resource.nvidia.com/v1beta1" ` +
				`or "resource.gpudra.io/v1alpha1" and kind "ComputeDomain"`},
	}
	nv := MustResolve(Flags{Compatibility: "nvidia"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nv.DecodeComputeDomain([]byte(tt.raw))
			if tt.err != "" {
				require.Error(t, err)
				assert.Nil(t, got)
				assert.Equal(t, tt.err, err.Error())
				var ce *ConfigError
				assert.True(t, errors.As(err, &ce), "%T", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// Natively only gpudra's group is read: a manifest of NVIDIA's fails as
// v1alpha1.DecodeComputeDomain fails it.
func TestDecodeComputeDomainNative(t *testing.T) {
	_, err := Default().DecodeComputeDomain([]byte(nvDomainYAML))
	var de *v1alpha1.DecodeError
	require.True(t, errors.As(err, &de), "%T %v", err, err)
	assert.Equal(t, `invalid ComputeDomain: apiVersion: Unsupported value: "resource.nvidia.com/v1beta1": `+
		`supported values: "resource.gpudra.io/v1alpha1"`, err.Error())

	cd, err := Default().DecodeComputeDomain([]byte(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain",` +
		`"metadata":{"name":"bandwidth-test"},"spec":{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"bandwidth-test-channel"}}}}`))
	require.NoError(t, err)
	assert.Equal(t, wantDomain(nil), cd)
}

// FuzzDecodeComputeDomainNVIDIA: the NVIDIA mode's ComputeDomain decoder
// never panics, fails only with a *ConfigError or *v1alpha1.DecodeError and
// no object, and returns only valid objects of gpudra's type.
func FuzzDecodeComputeDomainNVIDIA(f *testing.F) {
	f.Add([]byte(nvDomainYAML))
	f.Add([]byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomain","spec":{"channel":{"resourceClaimTemplate":{"name":"c"},` +
		`"allocationMode":"All"}},"status":{"status":"Ready","nodes":[{"name":"n","ipAddress":"10.0.0.1","cliqueID":"a.1","index":0}]}}`))
	f.Add([]byte(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain","spec":{"numNodes":3,"channel":{"resourceClaimTemplate":{"name":"c"}}}}`))
	nv := MustResolve(Flags{Compatibility: "nvidia"})
	f.Fuzz(func(t *testing.T, raw []byte) {
		cd, err := nv.DecodeComputeDomain(raw)
		if err != nil {
			var ce *ConfigError
			var de *v1alpha1.DecodeError
			if !errors.As(err, &ce) && !errors.As(err, &de) {
				t.Fatalf("error is neither a *ConfigError nor a *v1alpha1.DecodeError: %T %v", err, err)
			}
			if cd != nil {
				t.Fatalf("object returned together with error %v", err)
			}
			return
		}
		if cd.APIVersion != v1alpha1.APIVersion || cd.Kind != v1alpha1.ComputeDomainKind {
			t.Fatalf("accepted %q as %s %s", raw, cd.APIVersion, cd.Kind)
		}
		if errs := v1alpha1.ValidateComputeDomain(cd); len(errs) > 0 {
			t.Fatalf("accepted %q gives an invalid ComputeDomain: %v", raw, errs)
		}
	})
}
