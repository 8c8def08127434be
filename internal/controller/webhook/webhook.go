package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Path is the URL path under which the gpu-controller serves the handler and
// which the ValidatingWebhookConfiguration names.
const Path = "/validate-resource-claim-parameters"

// MaxRequestBytes bounds the AdmissionReview bodies the handler reads. An
// object and its old version each stay below the API server's 3 MiB request
// limit.
const MaxRequestBytes = 7 << 20

// Values of the decision label of DecisionsMetric.
const (
	DecisionAllowed = "allowed"
	DecisionDenied  = "denied"
	// DecisionError counts HTTP requests that were not a readable
	// AdmissionReview; their kind label is KindUnknown.
	DecisionError = "error"
)

// Kind label values of DecisionsMetric besides the kinds the webhook checks.
const (
	// KindOther counts reviews of every kind the webhook does not check.
	// The label never carries a kind from the request: anyone who can
	// reach the webhook's Service could otherwise add a series (and its
	// memory, for the life of the process) per made-up kind.
	KindOther = "other"
	// KindUnknown counts HTTP requests that were not a readable review.
	KindUnknown = "unknown"
)

// DecisionsMetric is the name of the counter of admission decisions, with
// labels kind (ResourceClaim, ResourceClaimTemplate, DeviceClass,
// ComputeDomain, other or unknown) and decision (allowed, denied, error).
const DecisionsMetric = "gpudra_webhook_admission_decisions_total"

// maxLoggedChars bounds each string from a request that the handler logs.
const maxLoggedChars = 256

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(admissionv1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// Handler is an http.Handler for admission.k8s.io/v1 AdmissionReview
// requests about ResourceClaims, ResourceClaimTemplates, DeviceClasses and
// ComputeDomains.
type Handler struct {
	decisions *prometheus.CounterVec
	// names: the driver whose opaque configurations are checked, and how
	// they are decoded.
	names compat.Names
}

// NewHandler returns a Handler for gpudra's native driver whose decision
// counter is registered with reg.
func NewHandler(reg prometheus.Registerer) (*Handler, error) {
	return NewHandlerFor(reg, compat.Default())
}

// NewHandlerFor is NewHandler for the driver names (e.g. gpu.nvidia.com in
// the NVIDIA compatibility mode, whose GpuConfig and MigDeviceConfig are
// checked, and NVIDIA's ComputeDomains besides gpudra's).
func NewHandlerFor(reg prometheus.Registerer, names compat.Names) (*Handler, error) {
	h := &Handler{names: names,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: DecisionsMetric,
			Help: "Admission requests answered by the gpudra webhook, by object kind and decision.",
		}, []string{"kind", "decision"}),
	}
	if err := reg.Register(h.decisions); err != nil {
		return nil, fmt.Errorf("register metric %s: %w", DecisionsMetric, err)
	}
	return h, nil
}

// ServeHTTP answers one AdmissionReview. A request that is not a POST of a
// JSON admission.k8s.io/v1 AdmissionReview with a request gets an HTTP error
// (405, 415, 413 or 400) instead of a review.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context()).WithValues("remote", r.RemoteAddr)
	if r.Method != http.MethodPost {
		h.httpError(logger, w, http.StatusMethodNotAllowed, fmt.Errorf("method %s: only POST is accepted", r.Method))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.httpError(logger, w, http.StatusUnsupportedMediaType,
			fmt.Errorf("content type %q: expected application/json", r.Header.Get("Content-Type")))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		h.httpError(logger, w, code, fmt.Errorf("read request body: %w", err))
		return
	}
	review, err := decodeReview(body)
	if err != nil {
		h.httpError(logger, w, http.StatusBadRequest, err)
		return
	}

	req := review.Request
	ctx := klog.NewContext(r.Context(), logger.WithValues("uid", clip(string(req.UID)), "kind", clip(req.Kind.Kind),
		"namespace", clip(req.Namespace), "name", clip(req.Name), "operation", clip(string(req.Operation))))
	resp := h.Review(ctx, req)
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	data, err := json.Marshal(&out)
	if err != nil {
		h.httpError(logger, w, http.StatusInternalServerError, fmt.Errorf("encode AdmissionReview response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		logger.Error(err, "Writing the admission response failed", "uid", req.UID)
	}
}

// decodeReview reads an admission.k8s.io/v1 AdmissionReview that carries a
// request.
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	review := &admissionv1.AdmissionReview{}
	_, gvk, err := codecs.UniversalDeserializer().Decode(body, nil, review)
	if err != nil {
		return nil, fmt.Errorf("request body is not an admission.k8s.io/v1 AdmissionReview "+
			"(list only v1 in the webhook's admissionReviewVersions): %w", err)
	}
	if gvk == nil || *gvk != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, fmt.Errorf("request body is a %v, expected an admission.k8s.io/v1 AdmissionReview", gvk)
	}
	if review.Request == nil {
		return nil, errors.New("AdmissionReview has no request")
	}
	return review, nil
}

func (h *Handler) httpError(logger klog.Logger, w http.ResponseWriter, code int, err error) {
	logger.Info("Rejecting malformed admission request", "status", code, "err", err)
	h.decisions.WithLabelValues(KindUnknown, DecisionError).Inc()
	http.Error(w, err.Error(), code)
}

// Review decides one admission request. The response echoes the request's
// UID; a denial carries code 400 and a message naming the object, the config
// and the problem.
func (h *Handler) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	logger := klog.FromContext(ctx)
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	msg, err := review(h.names, req)
	switch {
	case err != nil:
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest,
			Reason: metav1.StatusReasonBadRequest, Message: err.Error()}
		logger.Error(err, "Cannot read the object under review; denying it")
	case msg != "":
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest,
			Reason: metav1.StatusReasonBadRequest, Message: msg}
		logger.V(2).Info("Denied an invalid object", "reason", msg)
	default:
		logger.V(5).Info("Allowed")
	}
	decision := DecisionAllowed
	if !resp.Allowed {
		decision = DecisionDenied
	}
	h.decisions.WithLabelValues(kindLabel(req.Kind.Kind), decision).Inc()
	return resp
}

// kindLabel is the kind label of a review of kind: the kind itself for the
// kinds the webhook checks, KindOther for any other.
func kindLabel(kind string) string {
	switch kind {
	case KindResourceClaim, KindResourceClaimTemplate, KindDeviceClass, KindComputeDomain:
		return kind
	default:
		return KindOther
	}
}

// clip shortens a string from a request for the log.
func clip(s string) string {
	if len(s) <= maxLoggedChars {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:maxLoggedChars], ""), len(s))
}
