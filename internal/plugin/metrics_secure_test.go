package plugin

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

func TestValidateMetrics(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    MetricsOptions
		want string
	}{
		{"plain", MetricsOptions{}, ""},
		{"secure, self-signed", MetricsOptions{Secure: true}, ""},
		{"secure, files", MetricsOptions{Secure: true, CertFile: "c", KeyFile: "k"}, ""},
		{"files without secure", MetricsOptions{CertFile: "c", KeyFile: "k"}, "need --metrics-secure"},
		{"certificate without key", MetricsOptions{Secure: true, CertFile: "c"}, "give both"},
		{"key without certificate", MetricsOptions{Secure: true, KeyFile: "k"}, "give both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			o.Metrics = tc.m
			err := o.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestSecureMetrics starts the plugin with --metrics-secure: the metrics
// address speaks only HTTPS, /metrics refuses a request without a token and
// the probes' /healthz and /readyz answer without one. The token cases are
// in internal/shared/endpoints (TestDelegatedAuth).
func TestSecureMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	o := testOptions(t)
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	o.MetricsAddress = "127.0.0.1:0"
	o.Metrics.Secure = true
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})
	p, err := Start(ctx, o, client, cancel)
	require.NoError(t, err)
	defer p.Stop()

	httpsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed
	get := func(c *http.Client, url string) int {
		resp, err := c.Get(url)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	base := "https://" + p.MetricsAddr.String()
	require.Equal(t, http.StatusUnauthorized, get(httpsClient, base+"/metrics"))
	require.Equal(t, http.StatusOK, get(httpsClient, base+"/healthz"))
	require.Equal(t, http.StatusInternalServerError, get(httpsClient, base+"/readyz"), "not registered yet, but answered")
	require.Equal(t, http.StatusBadRequest, get(http.DefaultClient, "http://"+p.MetricsAddr.String()+"/healthz"), "plain HTTP is refused")
	require.NoError(t, context.Cause(ctx))
}
