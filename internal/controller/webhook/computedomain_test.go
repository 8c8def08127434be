package webhook

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

const (
	gpudraDomains = "resource.gpudra.io/v1alpha1"
	nvidiaDomains = "resource.nvidia.com/v1beta1"
	goodDomain    = `{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"channels"},"allocationMode":"Single"}}`
)

// domain is a ComputeDomain of apiVersion named cd in namespace default, as
// the API server sends it (with metadata and a status); spec is raw JSON,
// "" for none.
func domain(apiVersion, spec string) []byte {
	obj := map[string]any{"apiVersion": apiVersion, "kind": KindComputeDomain,
		"metadata": map[string]any{"name": "cd", "namespace": "default", "uid": "0c9a", "finalizers": []string{"x/y"},
			"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update"}}},
		"status": map[string]any{"status": "NotReady"}}
	if spec != "" {
		obj["spec"] = json.RawMessage(spec)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return data
}

func domainRequest(apiVersion string, op admissionv1.Operation, obj, old []byte) *admissionv1.AdmissionRequest {
	group, version, _ := strings.Cut(apiVersion, "/")
	return &admissionv1.AdmissionRequest{
		UID:       types.UID("uid-cd-" + apiVersion),
		Kind:      metav1.GroupVersionKind{Group: group, Version: version, Kind: KindComputeDomain},
		Resource:  metav1.GroupVersionResource{Group: group, Version: version, Resource: "computedomains"},
		Namespace: "default", Name: "cd", Operation: op,
		Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old},
	}
}

func TestAdmissionComputeDomain(t *testing.T) {
	const (
		prefix    = "ComputeDomain default/cd: invalid ComputeDomain: "
		nvPrefix  = "ComputeDomain default/cd: invalid resource.nvidia.com/v1beta1 ComputeDomain: "
		immutable = "immutable: delete the ComputeDomain and create it again to change it"
	)
	native := compat.Default()
	nvidia := compat.MustResolve(compat.Flags{Compatibility: "nvidia"})
	tests := []struct {
		name    string
		names   compat.Names
		req     *admissionv1.AdmissionRequest
		wantMsg string // "" = allowed
	}{
		{name: "valid", names: native, req: domainRequest(gpudraDomains, admissionv1.Create, domain(gpudraDomains, goodDomain), nil)},
		{name: "negative numNodes", names: native, wantMsg: prefix + "spec.numNodes: Invalid value: -1: must be 0 or more",
			req: domainRequest(gpudraDomains, admissionv1.Create,
				domain(gpudraDomains, `{"numNodes":-1,"channel":{"resourceClaimTemplate":{"name":"c"}}}`), nil)},
		{name: "bad allocation mode", names: native,
			wantMsg: prefix + `spec.channel.allocationMode: Unsupported value: "Every": supported values: "Single", "All"`,
			req: domainRequest(gpudraDomains, admissionv1.Create,
				domain(gpudraDomains, `{"channel":{"resourceClaimTemplate":{"name":"c"},"allocationMode":"Every"}}`), nil)},
		{name: "bad template name", names: native,
			wantMsg: prefix + `spec.channel.resourceClaimTemplate.name: Invalid value: "IMEX_channels": a ResourceClaimTemplate name must be a DNS-1123 subdomain`,
			req: domainRequest(gpudraDomains, admissionv1.Create,
				domain(gpudraDomains, `{"channel":{"resourceClaimTemplate":{"name":"IMEX_channels"}}}`), nil)},
		{name: "unknown field", names: native, wantMsg: prefix + `strict decoding error: unknown field "spec.channel.mode"`,
			req: domainRequest(gpudraDomains, admissionv1.Create,
				domain(gpudraDomains, `{"channel":{"resourceClaimTemplate":{"name":"c"},"mode":"All"}}`), nil)},
		{name: "no spec", names: native, wantMsg: prefix + "spec.channel: Required value",
			req: domainRequest(gpudraDomains, admissionv1.Create, domain(gpudraDomains, ""), nil)},

		{name: "update keeping the spec", names: native,
			req: domainRequest(gpudraDomains, admissionv1.Update, domain(gpudraDomains, goodDomain), domain(gpudraDomains, goodDomain))},
		{name: "update of an invalid object that keeps its spec (finalizer removal)", names: native,
			req: domainRequest(gpudraDomains, admissionv1.Update, domain(gpudraDomains, `{"numNodes":-5}`), domain(gpudraDomains, `{"numNodes":-5}`))},
		{name: "update changing numNodes", names: native,
			wantMsg: "ComputeDomain default/cd: spec.numNodes: Invalid value: 3: " + immutable + " (it was 2)",
			req: domainRequest(gpudraDomains, admissionv1.Update,
				domain(gpudraDomains, strings.Replace(goodDomain, `"numNodes":2`, `"numNodes":3`, 1)), domain(gpudraDomains, goodDomain))},
		{name: "update changing the allocation mode", names: native,
			wantMsg: `ComputeDomain default/cd: spec.channel: Invalid value: "resourceClaimTemplate.name=\"channels\", allocationMode=\"All\"": ` + immutable,
			req: domainRequest(gpudraDomains, admissionv1.Update,
				domain(gpudraDomains, strings.Replace(goodDomain, "Single", "All", 1)), domain(gpudraDomains, goodDomain))},
		{name: "update spelling out a default", names: native,
			req: domainRequest(gpudraDomains, admissionv1.Update, domain(gpudraDomains, goodDomain),
				domain(gpudraDomains, `{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"channels"}}}`))},
		{name: "update to an invalid spec", names: native, wantMsg: prefix + "spec.numNodes: Invalid value: -1",
			req: domainRequest(gpudraDomains, admissionv1.Update,
				domain(gpudraDomains, strings.Replace(goodDomain, `"numNodes":2`, `"numNodes":-1`, 1)), domain(gpudraDomains, goodDomain))},
		{name: "update of an invalid stored spec", names: native,
			wantMsg: "ComputeDomain default/cd: spec: immutable: numNodes and channel cannot change after the ComputeDomain is created",
			req:     domainRequest(gpudraDomains, admissionv1.Update, domain(gpudraDomains, goodDomain), domain(gpudraDomains, `{"numNodes":-5}`))},

		{name: "NVIDIA's group is not checked natively", names: native,
			req: domainRequest(nvidiaDomains, admissionv1.Create, domain(nvidiaDomains, `{"numNodes":-1}`), nil)},
		{name: "NVIDIA's group in the NVIDIA mode", names: nvidia,
			req: domainRequest(nvidiaDomains, admissionv1.Create, domain(nvidiaDomains, goodDomain), nil)},
		{name: "NVIDIA's group, misspelt field", names: nvidia,
			wantMsg: nvPrefix + `unknown field "spec.channel.resourceClaimTemplate.Name"`,
			req: domainRequest(nvidiaDomains, admissionv1.Create,
				domain(nvidiaDomains, `{"channel":{"resourceClaimTemplate":{"Name":"c"}}}`), nil)},
		{name: "NVIDIA's group, numNodes beyond int32", names: nvidia,
			wantMsg: nvPrefix + "spec.numNodes: Invalid value: 4294967296: must be between 0 and 2147483647",
			req: domainRequest(nvidiaDomains, admissionv1.Create,
				domain(nvidiaDomains, `{"numNodes":4294967296,"channel":{"resourceClaimTemplate":{"name":"c"}}}`), nil)},
		{name: "NVIDIA's group, spec change", names: nvidia,
			wantMsg: "ComputeDomain default/cd: spec.channel: Invalid value: ",
			req: domainRequest(nvidiaDomains, admissionv1.Update,
				domain(nvidiaDomains, strings.Replace(goodDomain, "channels", "others", 1)), domain(nvidiaDomains, goodDomain))},
		{name: "gpudra's group in the NVIDIA mode", names: nvidia, wantMsg: prefix + "spec.numNodes: Invalid value: -1",
			req: domainRequest(gpudraDomains, admissionv1.Create,
				domain(gpudraDomains, `{"numNodes":-1,"channel":{"resourceClaimTemplate":{"name":"c"}}}`), nil)},

		{name: "another version of gpudra's group is not checked", names: native,
			req: domainRequest("resource.gpudra.io/v1beta1", admissionv1.Create, domain("resource.gpudra.io/v1beta1", `{}`), nil)},
		{name: "status subresource is not checked", names: native, req: func() *admissionv1.AdmissionRequest {
			r := domainRequest(gpudraDomains, admissionv1.Update, domain(gpudraDomains, `{}`), domain(gpudraDomains, goodDomain))
			r.SubResource = "status"
			return r
		}()},
		{name: "deletion is not checked", names: native,
			req: domainRequest(gpudraDomains, admissionv1.Delete, nil, domain(gpudraDomains, `{}`))},
		{name: "unreadable object", names: native, wantMsg: "cannot read the ComputeDomain default/cd: decode: json: cannot unmarshal",
			req: domainRequest(gpudraDomains, admissionv1.Create, []byte(`{"metadata":[]}`), nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHandlerFor(prometheus.NewRegistry(), tc.names)
			require.NoError(t, err)
			w := post(t, h, "application/json", reviewBody(t, tc.req))
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			var out admissionv1.AdmissionReview
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
			require.NotNil(t, out.Response)
			assert.Equal(t, tc.req.UID, out.Response.UID)
			if tc.wantMsg == "" {
				assert.True(t, out.Response.Allowed, "response: %+v", out.Response.Result)
				return
			}
			require.False(t, out.Response.Allowed)
			assert.Equal(t, int32(http.StatusBadRequest), out.Response.Result.Code)
			assert.True(t, strings.HasPrefix(out.Response.Result.Message, tc.wantMsg),
				"message %q does not start with %q", out.Response.Result.Message, tc.wantMsg)
		})
	}
}

// The decision counter counts ComputeDomain reviews under their own kind.
func TestDecisionMetricsComputeDomain(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := NewHandler(reg)
	require.NoError(t, err)
	post(t, h, "application/json", reviewBody(t, domainRequest(gpudraDomains, admissionv1.Create, domain(gpudraDomains, goodDomain), nil)))
	post(t, h, "application/json", reviewBody(t, domainRequest(gpudraDomains, admissionv1.Create, domain(gpudraDomains, `{}`), nil)))
	assert.Equal(t, 1.0, counterValue(t, reg, KindComputeDomain, DecisionAllowed))
	assert.Equal(t, 1.0, counterValue(t, reg, KindComputeDomain, DecisionDenied))
}

func counterValue(t *testing.T, reg *prometheus.Registry, kind, decision string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != DecisionsMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["decision"] == decision {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
