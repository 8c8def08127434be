package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

const (
	goodParams  = `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}}`
	badParams   = `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"Sometimes"}}`
	typoParams  = `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"stratgy":"TimeSlicing"}}`
	otherParams = `{"anything":"goes"}`
	badMsg      = `invalid GpuClaimParameters: sharing.strategy: Unsupported value: "Sometimes": supported values: "Exclusive", "TimeSlicing", "MPS"`
)

type cfg struct {
	requests []string
	driver   string
	params   string
}

// claimSpecJSON builds spec.devices with one request "gpu" and the configs.
func claimSpecJSON(version string, cfgs ...cfg) map[string]any {
	request := map[string]any{"name": "gpu", "exactly": map[string]any{"deviceClassName": "gpu.gpudra.io"}}
	if version == "v1beta1" {
		request = map[string]any{"name": "gpu", "deviceClassName": "gpu.gpudra.io"}
	}
	var configs []any
	for _, c := range cfgs {
		entry := map[string]any{"opaque": map[string]any{"driver": c.driver, "parameters": json.RawMessage(c.params)}}
		if c.requests != nil {
			entry["requests"] = c.requests
		}
		configs = append(configs, entry)
	}
	devices := map[string]any{"requests": []any{request}}
	if configs != nil {
		devices["config"] = configs
	}
	return map[string]any{"devices": devices}
}

func object(kind, version, name string, cfgs ...cfg) []byte {
	spec := claimSpecJSON(version, cfgs...)
	if kind == KindResourceClaimTemplate {
		spec = map[string]any{"spec": spec}
	}
	data, err := json.Marshal(map[string]any{
		"apiVersion": "resource.k8s.io/" + version, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     spec,
	})
	if err != nil {
		panic(err)
	}
	return data
}

func request(kind, version string, op admissionv1.Operation, obj, old []byte) *admissionv1.AdmissionRequest {
	resource := map[string]string{KindResourceClaim: "resourceclaims", KindResourceClaimTemplate: "resourceclaimtemplates",
		KindDeviceClass: "deviceclasses"}[kind]
	namespace := "default"
	if kind == KindDeviceClass {
		namespace = "" // cluster-scoped
	}
	return &admissionv1.AdmissionRequest{
		UID:       types.UID("uid-" + kind + "-" + version),
		Kind:      metav1.GroupVersionKind{Group: resourceGroup, Version: version, Kind: kind},
		Resource:  metav1.GroupVersionResource{Group: resourceGroup, Version: version, Resource: resource},
		Namespace: namespace, Name: "bad", Operation: op,
		Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old},
	}
}

func reviewBody(t *testing.T, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	data, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	require.NoError(t, err)
	return data
}

func post(t *testing.T, h http.Handler, contentType string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAdmissionKindsAndVersions(t *testing.T) {
	gpu := []string{"gpu"}
	for _, kind := range []string{KindResourceClaim, KindResourceClaimTemplate} {
		path := map[string]string{KindResourceClaim: "spec.devices.config", KindResourceClaimTemplate: "spec.spec.devices.config"}[kind]
		for _, version := range SupportedVersions {
			tests := []struct {
				name    string
				op      admissionv1.Operation
				obj     []byte
				old     []byte
				wantMsg string // "" = allowed
			}{
				{name: "good", op: admissionv1.Create, obj: object(kind, version, "bad", cfg{gpu, "gpu.gpudra.io", goodParams})},
				{name: "bad", op: admissionv1.Create, obj: object(kind, version, "bad", cfg{gpu, "gpu.gpudra.io", badParams}),
					wantMsg: kind + " default/bad: " + path + "[0] (requests: gpu): " + badMsg},
				{name: "typo", op: admissionv1.Create, obj: object(kind, version, "bad", cfg{nil, "gpu.gpudra.io", typoParams}),
					wantMsg: kind + " default/bad: " + path + "[0] (all requests): invalid GpuClaimParameters: strict decoding error: unknown field \"sharing.stratgy\""},
				{name: "second of two bad", op: admissionv1.Create, obj: object(kind, version, "bad",
					cfg{gpu, "other.example.com", badParams}, cfg{[]string{"gpu", "gpu/h100"}, "gpu.gpudra.io", badParams}),
					wantMsg: kind + " default/bad: " + path + "[1] (requests: gpu, gpu/h100): " + badMsg},
				{name: "other driver", op: admissionv1.Create, obj: object(kind, version, "bad", cfg{gpu, "other.example.com", otherParams})},
				{name: "no config", op: admissionv1.Create, obj: object(kind, version, "bad")},
				{name: "delete", op: admissionv1.Delete, old: object(kind, version, "bad", cfg{gpu, "gpu.gpudra.io", badParams})},
				{name: "update keeps bad config", op: admissionv1.Update,
					obj: object(kind, version, "bad", cfg{gpu, "gpu.gpudra.io", badParams}),
					old: object(kind, version, "bad", cfg{gpu, "gpu.gpudra.io", badParams})},
				{name: "update to bad config", op: admissionv1.Update,
					obj:     object(kind, version, "bad", cfg{gpu, "gpu.gpudra.io", badParams}),
					old:     object(kind, version, "bad", cfg{gpu, "gpu.gpudra.io", goodParams}),
					wantMsg: kind + " default/bad: " + path + "[0] (requests: gpu): " + badMsg},
			}
			for _, tc := range tests {
				t.Run(fmt.Sprintf("%s/%s/%s", kind, version, tc.name), func(t *testing.T) {
					h, err := NewHandler(prometheus.NewRegistry())
					require.NoError(t, err)
					req := request(kind, version, tc.op, tc.obj, tc.old)
					w := post(t, h, "application/json", reviewBody(t, req))
					require.Equal(t, http.StatusOK, w.Code, w.Body.String())
					var out admissionv1.AdmissionReview
					require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
					assert.Equal(t, "admission.k8s.io/v1", out.APIVersion)
					assert.Equal(t, "AdmissionReview", out.Kind)
					require.NotNil(t, out.Response)
					assert.Equal(t, req.UID, out.Response.UID)
					if tc.wantMsg == "" {
						assert.True(t, out.Response.Allowed, "response: %+v", out.Response.Result)
						return
					}
					assert.False(t, out.Response.Allowed)
					require.NotNil(t, out.Response.Result)
					assert.Equal(t, int32(http.StatusBadRequest), out.Response.Result.Code)
					assert.Equal(t, tc.wantMsg, out.Response.Result.Message)
				})
			}
		}
	}
}

func TestReviewEdgeCases(t *testing.T) {
	bad := cfg{[]string{"gpu"}, "gpu.gpudra.io", badParams}
	tests := []struct {
		name    string
		req     *admissionv1.AdmissionRequest
		allowed bool
		wantMsg string
	}{
		{name: "unsupported version is not checked", allowed: true,
			req: request(KindResourceClaim, "v1alpha3", admissionv1.Create, object(KindResourceClaim, "v1", "bad", bad), nil)},
		{name: "status subresource", allowed: true, req: func() *admissionv1.AdmissionRequest {
			r := request(KindResourceClaim, "v1", admissionv1.Update, object(KindResourceClaim, "v1", "bad", bad), nil)
			r.SubResource = "status"
			return r
		}()},
		{name: "other kind", allowed: true, req: func() *admissionv1.AdmissionRequest {
			r := request(KindResourceClaim, "v1", admissionv1.Create, []byte(`{"kind":"ResourceSlice"}`), nil)
			r.Kind.Kind = "ResourceSlice"
			return r
		}()},
		{name: "generateName", wantMsg: "ResourceClaim default/pod-gpu-<generated>: spec.devices.config[0] (requests: gpu): " + badMsg,
			req: request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "", bad), nil)},
		{name: "unreadable object", wantMsg: "cannot read the ResourceClaim default/bad: json: cannot unmarshal",
			req: request(KindResourceClaim, "v1", admissionv1.Create, []byte(`{"spec":{"devices":{"config":"x"}}}`), nil)},
		{name: "create without object", wantMsg: "cannot read the ResourceClaim default/bad: the request carries no object",
			req: request(KindResourceClaim, "v1", admissionv1.Create, nil, nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "generateName" {
				tc.req.Object.Raw = bytes.Replace(tc.req.Object.Raw, []byte(`"name":""`), []byte(`"generateName":"pod-gpu-"`), 1)
				tc.req.Name = ""
			}
			h, err := NewHandler(prometheus.NewRegistry())
			require.NoError(t, err)
			resp := h.Review(t.Context(), tc.req)
			assert.Equal(t, tc.req.UID, resp.UID)
			assert.Equal(t, tc.allowed, resp.Allowed)
			if !tc.allowed {
				require.NotNil(t, resp.Result)
				assert.Equal(t, int32(400), resp.Result.Code)
				assert.True(t, strings.HasPrefix(resp.Result.Message, tc.wantMsg), "message %q does not start with %q", resp.Result.Message, tc.wantMsg)
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	valid := reviewBody(t, request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "ok"), nil))
	tests := []struct {
		name        string
		method      string
		contentType string
		body        []byte
		wantCode    int
		wantBody    string
	}{
		{name: "malformed body", contentType: "application/json", body: []byte(`{"apiVersion":`), wantCode: 400, wantBody: "not an admission.k8s.io/v1 AdmissionReview"},
		{name: "not an object", contentType: "application/json", body: []byte(`[]`), wantCode: 400},
		{name: "v1beta1 review", contentType: "application/json", wantCode: 400, wantBody: "admissionReviewVersions",
			body: bytes.Replace(valid, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1)},
		{name: "no request", contentType: "application/json", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
			wantCode: 400, wantBody: "AdmissionReview has no request"},
		{name: "wrong content type", contentType: "text/plain", body: valid, wantCode: 415, wantBody: "expected application/json"},
		{name: "no content type", body: valid, wantCode: 415},
		{name: "GET", method: http.MethodGet, contentType: "application/json", wantCode: 405},
		{name: "too large", contentType: "application/json", body: bytes.Repeat([]byte(" "), MaxRequestBytes+1), wantCode: 413},
		{name: "charset parameter is fine", contentType: "application/json; charset=utf-8", body: valid, wantCode: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHandler(prometheus.NewRegistry())
			require.NoError(t, err)
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			r := httptest.NewRequest(method, Path, bytes.NewReader(tc.body))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			assert.Equal(t, tc.wantCode, w.Code, w.Body.String())
			assert.Contains(t, w.Body.String(), tc.wantBody)
		})
	}
}

func TestDecisionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := NewHandler(reg)
	require.NoError(t, err)
	_, err = NewHandler(reg)
	require.Error(t, err, "registering twice must fail")

	bad := cfg{[]string{"gpu"}, "gpu.gpudra.io", badParams}
	post(t, h, "application/json", reviewBody(t, request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "a", bad), nil)))
	post(t, h, "application/json", reviewBody(t, request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "b"), nil)))
	post(t, h, "application/json", reviewBody(t, request(KindResourceClaimTemplate, "v1", admissionv1.Create, object(KindResourceClaimTemplate, "v1", "c"), nil)))
	post(t, h, "application/json", reviewBody(t, request(KindDeviceClass, "v1", admissionv1.Create, class("v1", "d", bad), nil)))
	post(t, h, "application/json", []byte("garbage"))

	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != DecisionsMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["kind"]+"/"+labels["decision"]] = m.GetCounter().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{
		"ResourceClaim/denied":          1,
		"ResourceClaim/allowed":         1,
		"ResourceClaimTemplate/allowed": 1,
		"DeviceClass/denied":            1,
		"unknown/error":                 1,
	}, got)
}

// TestDecisionMetricKindsBounded sends reviews of many distinct, long kinds:
// the decision counter must keep a bounded set of kind labels (every kind
// the webhook does not check counts as "other"), or hostile requests grow
// the controller's heap without bound.
func TestDecisionMetricKindsBounded(t *testing.T) {
	tests := []struct {
		name     string
		kinds    int
		kindSize int
	}{
		{name: "many short kinds", kinds: 200, kindSize: 16},
		{name: "a few huge kinds", kinds: 5, kindSize: 64 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h, err := NewHandler(reg)
			require.NoError(t, err)
			for i := range tc.kinds {
				req := request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "a"), nil)
				req.Kind.Kind = fmt.Sprintf("%0*d", tc.kindSize, i)
				w := post(t, h, "application/json", reviewBody(t, req))
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			}
			post(t, h, "application/json", reviewBody(t, request(KindDeviceClass, "v1", admissionv1.Create, class("v1", "d"), nil)))
			families, err := reg.Gather()
			require.NoError(t, err)
			kinds := map[string]float64{}
			for _, f := range families {
				if f.GetName() != DecisionsMetric {
					continue
				}
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "kind" {
							kinds[l.GetValue()] += m.GetCounter().GetValue()
						}
					}
				}
			}
			assert.Equal(t, map[string]float64{KindOther: float64(tc.kinds), KindDeviceClass: 1}, kinds)
		})
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("k", maxLoggedChars+10)
	for _, tc := range []struct{ in, want string }{
		{in: "ResourceClaim", want: "ResourceClaim"},
		{in: long[:maxLoggedChars], want: long[:maxLoggedChars]},
		{in: long, want: long[:maxLoggedChars] + fmt.Sprintf("... (%d bytes)", len(long))},
		{in: strings.Repeat("k", maxLoggedChars-1) + "é", want: strings.Repeat("k", maxLoggedChars-1) + fmt.Sprintf("... (%d bytes)", maxLoggedChars+1)},
	} {
		assert.Equal(t, tc.want, clip(tc.in))
	}
}
