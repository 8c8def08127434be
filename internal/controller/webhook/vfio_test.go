package webhook

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// With passthrough the webhook admits a VfioDeviceConfig and checks it
// strictly; without, it refuses it saying how to turn passthrough on.
func TestAdmissionVfioDeviceConfig(t *testing.T) {
	const (
		good = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig","iommu":{"backendPolicy":"LegacyOnly","enableAPIDevice":true}}`
		typo = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig","iommu":{"backendpolicy":"LegacyOnly"}}`
	)
	vm := []string{"vm"}
	tests := []struct {
		name        string
		passthrough bool
		params      string
		wantMsg     string // "" = allowed
	}{
		{"admitted with passthrough", true, good, ""},
		{"misspelt field", true, typo, `unknown field "iommu.backendpolicy"`},
		{"refused without passthrough", false, good, "kubeletPlugin.passthrough=true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHandlerFor(prometheus.NewRegistry(), compat.MustResolve(compat.Flags{Compatibility: "nvidia", Passthrough: tc.passthrough}))
			require.NoError(t, err)
			req := request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "vm", cfg{vm, "gpu.nvidia.com", tc.params}), nil)
			w := post(t, h, "application/json", reviewBody(t, req))
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			var out admissionv1.AdmissionReview
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
			if tc.wantMsg == "" {
				require.True(t, out.Response.Allowed, "response: %+v", out.Response.Result)
				return
			}
			require.False(t, out.Response.Allowed)
			require.Contains(t, out.Response.Result.Message, tc.wantMsg)
		})
	}
}
