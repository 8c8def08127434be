package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
)

// class builds a DeviceClass of the given version with a selector and the
// configs; requests of cfgs are ignored (class configs have none).
func class(version, name string, cfgs ...cfg) []byte {
	spec := map[string]any{"selectors": []any{map[string]any{"cel": map[string]any{"expression": `device.driver == "gpu.gpudra.io"`}}}}
	var configs []any
	for _, c := range cfgs {
		configs = append(configs, map[string]any{"opaque": map[string]any{"driver": c.driver, "parameters": json.RawMessage(c.params)}})
	}
	if configs != nil {
		spec["config"] = configs
	}
	data, err := json.Marshal(map[string]any{
		"apiVersion": "resource.k8s.io/" + version, "kind": KindDeviceClass,
		"metadata": map[string]any{"name": name}, "spec": spec,
	})
	if err != nil {
		panic(err)
	}
	return data
}

func TestAdmissionDeviceClass(t *testing.T) {
	good := cfg{nil, "gpu.gpudra.io", goodParams}
	bad := cfg{nil, "gpu.gpudra.io", badParams}
	other := cfg{nil, "other.example.com", otherParams}
	otherBad := cfg{nil, "other.example.com", badParams}
	const prefix = "DeviceClass gpu.gpudra.io: "
	for _, version := range SupportedVersions {
		tests := []struct {
			name    string
			op      admissionv1.Operation
			obj     []byte
			old     []byte
			wantMsg string // "" = allowed
		}{
			{name: "valid", op: admissionv1.Create, obj: class(version, "gpu.gpudra.io", good)},
			{name: "invalid", op: admissionv1.Create, obj: class(version, "gpu.gpudra.io", bad),
				wantMsg: prefix + "spec.config[0] (every request for this class): " + badMsg},
			{name: "unknown field", op: admissionv1.Create, obj: class(version, "gpu.gpudra.io", cfg{nil, "gpu.gpudra.io", typoParams}),
				wantMsg: prefix + "spec.config[0] (every request for this class): invalid GpuClaimParameters: strict decoding error: unknown field \"sharing.stratgy\""},
			{name: "other driver's config ignored", op: admissionv1.Create, obj: class(version, "gpu.gpudra.io", otherBad, other)},
			{name: "ours after another driver's", op: admissionv1.Create, obj: class(version, "gpu.gpudra.io", other, good, bad),
				wantMsg: prefix + "spec.config[2] (every request for this class): " + badMsg},
			{name: "no config", op: admissionv1.Create, obj: class(version, "gpu.gpudra.io")},
			{name: "update to bad config", op: admissionv1.Update,
				obj: class(version, "gpu.gpudra.io", bad), old: class(version, "gpu.gpudra.io", good),
				wantMsg: prefix + "spec.config[0] (every request for this class): " + badMsg},
			{name: "update adds bad config", op: admissionv1.Update,
				obj: class(version, "gpu.gpudra.io", good, bad), old: class(version, "gpu.gpudra.io", good),
				wantMsg: prefix + "spec.config[1] (every request for this class): " + badMsg},
			{name: "update keeps bad config", op: admissionv1.Update,
				obj: class(version, "gpu.gpudra.io", bad), old: class(version, "gpu.gpudra.io", bad)},
			{name: "update fixes bad config", op: admissionv1.Update,
				obj: class(version, "gpu.gpudra.io", good), old: class(version, "gpu.gpudra.io", bad)},
			{name: "delete", op: admissionv1.Delete, old: class(version, "gpu.gpudra.io", bad)},
		}
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/%s", version, tc.name), func(t *testing.T) {
				h, err := NewHandler(prometheus.NewRegistry())
				require.NoError(t, err)
				req := request(KindDeviceClass, version, tc.op, tc.obj, tc.old)
				req.Name = "gpu.gpudra.io"
				w := post(t, h, "application/json", reviewBody(t, req))
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				var out admissionv1.AdmissionReview
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
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

func TestDeviceClassUnreadable(t *testing.T) {
	h, err := NewHandler(prometheus.NewRegistry())
	require.NoError(t, err)
	resp := h.Review(t.Context(), request(KindDeviceClass, "v1", admissionv1.Create, []byte(`{"spec":{"config":{"opaque":1}}}`), nil))
	assert.False(t, resp.Allowed)
	require.NotNil(t, resp.Result)
	assert.Contains(t, resp.Result.Message, "cannot read the DeviceClass bad: json: cannot unmarshal")
}
