package status

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// TestScrapePluginsNeedToken: a plugin with --metrics-secure is not asked
// through the pod proxy (it would answer 401 or, over plain HTTP, 400); its
// node's error says why, the other nodes are read.
func TestScrapePluginsNeedToken(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, arg := range []string{"--metrics-secure", "--metrics-secure=true"} {
		t.Run(arg, func(t *testing.T) {
			secure := pluginPod("plugin-a", "node-a", 8081, t0)
			secure.Spec.Containers[0].Args = []string{"--metrics-address=:8081", arg}
			client := fake.NewClientset(secure, pluginPod("plugin-b", "node-b", 8081, t0))
			var asked []string
			client.AddProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
				asked = append(asked, a.(k8stesting.ProxyGetAction).GetName())
				return true, proxyResponse{body: []byte(metricsText)}, nil
			})
			usage, errs, err := ScrapePlugins(context.Background(), client, DefaultPluginNamespace)
			require.NoError(t, err)
			assert.Equal(t, []string{"plugin-b"}, asked)
			assert.ErrorIs(t, errs["node-a"], ErrMetricsNeedToken)
			assert.ErrorContains(t, errs["node-a"], "gpudra-system/plugin-a")
			assert.Contains(t, usage, "node-b")
			assert.NotContains(t, usage, "node-a")
		})
	}
}

func TestNotices(t *testing.T) {
	token := func(pod string) error { return errors.Join(errors.New("plugin pod "+pod), ErrMetricsNeedToken) }
	for _, tc := range []struct {
		name  string
		errs  map[string]error
		nodes map[string]bool
		want  []string
	}{
		{"none", nil, map[string]bool{"a": true}, nil},
		{"other error", map[string]error{"a": errors.New("forbidden")}, map[string]bool{"a": true},
			[]string{"No GPU telemetry for node a: forbidden"}},
		{"nodes without devices shown are left out", map[string]error{"a": errors.New("forbidden"), "z": token("p")},
			map[string]bool{}, nil},
		{"one line for every node that needs a token, first", map[string]error{"b": token("p1"), "a": token("p2"), "c": errors.New("timeout")},
			map[string]bool{"a": true, "b": true, "c": true},
			[]string{"No GPU telemetry (USED, UTIL) for node a, b: the plugin's /metrics needs a bearer token (kubeletPlugin.metrics.authentication), " +
				"which the API server's pod proxy does not pass on; read it with a token that may get /metrics, e.g. in Prometheus",
				"No GPU telemetry for node c: timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Notices(tc.errs, tc.nodes))
		})
	}
}

func TestNothingReadable(t *testing.T) {
	token := errors.Join(errors.New("plugin pod p"), ErrMetricsNeedToken)
	for _, tc := range []struct {
		name string
		read int
		errs map[string]error
		want bool
	}{
		{"nothing found", 0, nil, false},
		{"all need a token", 0, map[string]error{"a": token, "b": token}, true},
		{"one read", 1, map[string]error{"a": token}, false},
		{"another error: retried by the next sample", 0, map[string]error{"a": token, "b": errors.New("timeout")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NothingReadable(tc.read, tc.errs)
			if !tc.want {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrMetricsNeedToken)
		})
	}
}
