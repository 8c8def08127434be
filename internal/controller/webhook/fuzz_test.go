package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// FuzzHandler posts arbitrary bodies to the handler of both driver modes:
// it must never panic, answer a readable AdmissionReview with the request's
// UID or one of its documented HTTP errors, and keep the decision counter's
// kind label within its known values. Seeds are reviews from the unit tests
// (claims, templates, classes and ComputeDomains of both groups).
func FuzzHandler(f *testing.F) {
	gpu := []string{"gpu"}
	for _, req := range []*admissionv1.AdmissionRequest{
		request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "a", cfg{gpu, "gpu.gpudra.io", goodParams}), nil),
		request(KindResourceClaimTemplate, "v1beta2", admissionv1.Create,
			object(KindResourceClaimTemplate, "v1beta2", "b", cfg{nil, "gpu.gpudra.io", badParams}), nil),
		request(KindResourceClaim, "v1beta1", admissionv1.Update, object(KindResourceClaim, "v1beta1", "c", cfg{gpu, "gpu.gpudra.io", badParams}),
			object(KindResourceClaim, "v1beta1", "c", cfg{gpu, "gpu.gpudra.io", goodParams})),
		request(KindDeviceClass, "v1", admissionv1.Create, class("v1", "d", cfg{nil, "gpu.nvidia.com",
			`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`}), nil),
		domainRequest(gpudraDomains, admissionv1.Create, domain(gpudraDomains, goodDomain), nil),
		domainRequest(nvidiaDomains, admissionv1.Update, domain(nvidiaDomains, `{"numNodes":3,"channel":{"resourceClaimTemplate":{"name":"c"}}}`),
			domain(nvidiaDomains, goodDomain)),
	} {
		data, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`))
	f.Add([]byte(`{"apiVersion":`))

	reg := prometheus.NewRegistry()
	native, err := NewHandler(prometheus.WrapRegistererWith(prometheus.Labels{"mode": "native"}, reg))
	if err != nil {
		f.Fatal(err)
	}
	nvidia, err := NewHandlerFor(prometheus.WrapRegistererWith(prometheus.Labels{"mode": "nvidia"}, reg),
		compat.MustResolve(compat.Flags{Compatibility: "nvidia"}))
	if err != nil {
		f.Fatal(err)
	}
	quiet := klog.NewContext(context.Background(), logr.Discard())
	known := map[string]bool{KindResourceClaim: true, KindResourceClaimTemplate: true, KindDeviceClass: true, KindComputeDomain: true,
		KindOther: true, KindUnknown: true}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, h := range []*Handler{native, nvidia} {
			// Quiet: a line per rejected body would flood the fuzzer's output.
			r := httptest.NewRequestWithContext(quiet, http.MethodPost, Path, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			switch w.Code {
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
				continue
			case http.StatusOK:
			default:
				t.Fatalf("status %d: %s", w.Code, w.Body.String())
			}
			var in admissionv1.AdmissionReview
			if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
				t.Fatalf("answered 200 to a body that is no review with a request (%v)", err)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatalf("answer is not JSON: %v", err)
			}
			if out.Response == nil || out.Response.UID != in.Request.UID {
				t.Fatalf("answer %s does not carry the request's UID %q", w.Body.String(), in.Request.UID)
			}
			if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
				t.Fatalf("denial without a message: %s", w.Body.String())
			}
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range families {
			for _, m := range fam.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" && !known[l.GetValue()] {
						t.Fatalf("kind label %q is not one of the known values", l.GetValue())
					}
				}
			}
		}
	})
}
