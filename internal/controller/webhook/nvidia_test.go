package webhook

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// In the NVIDIA compatibility mode the webhook checks the configurations of
// gpu.nvidia.com with NVIDIA's API and leaves gpudra's native driver alone.
func TestAdmissionNVIDIAMode(t *testing.T) {
	const (
		nvGood  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50}}}`
		nvTypo  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsconfig":{}}}`
		nvVfio  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`
		prefix  = "ResourceClaim default/bad: spec.devices.config[0] (requests: gpu): "
		typoMsg = prefix + `invalid resource.nvidia.com/v1beta1 GpuConfig: unknown field "sharing.mpsconfig"`
	)
	gpu := []string{"gpu"}
	tests := []struct {
		name       string
		cfg        cfg
		wantPrefix string // "" = allowed
	}{
		{"NVIDIA config", cfg{gpu, "gpu.nvidia.com", nvGood}, ""},
		{"gpudra config under NVIDIA's driver name", cfg{gpu, "gpu.nvidia.com", goodParams}, ""},
		{"misspelt field", cfg{gpu, "gpu.nvidia.com", nvTypo}, typoMsg},
		{"unsupported kind", cfg{gpu, "gpu.nvidia.com", nvVfio}, prefix + "invalid resource.nvidia.com/v1beta1 VfioDeviceConfig: kind VfioDeviceConfig is not supported"},
		{"native driver is not ours in this mode", cfg{gpu, "gpu.gpudra.io", badParams}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHandlerFor(prometheus.NewRegistry(), compat.MustResolve(compat.Flags{Compatibility: "nvidia"}))
			require.NoError(t, err)
			req := request(KindResourceClaim, "v1", admissionv1.Create, object(KindResourceClaim, "v1", "bad", tc.cfg), nil)
			w := post(t, h, "application/json", reviewBody(t, req))
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			var out admissionv1.AdmissionReview
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
			if tc.wantPrefix == "" {
				assert.True(t, out.Response.Allowed, "response: %+v", out.Response.Result)
				return
			}
			assert.False(t, out.Response.Allowed)
			assert.Contains(t, out.Response.Result.Message, tc.wantPrefix)
		})
	}
}
