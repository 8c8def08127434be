package status

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// metricsText is a plugin's /metrics: gpu-0 held by a claim shared by two
// pods (two series), a MIG device without utilization yet, a free GPU.
const metricsText = `# TYPE gpudra_gpu_utilization_ratio gauge
gpudra_gpu_utilization_ratio{claim_name="c",claim_namespace="ns",device="gpu-0",mig_profile="",node="node-a",pod_name="p1",pod_namespace="ns",uuid="GPU-a"} 0.87
gpudra_gpu_utilization_ratio{claim_name="c",claim_namespace="ns",device="gpu-0",mig_profile="",node="node-a",pod_name="p2",pod_namespace="ns",uuid="GPU-a"} 0.87
gpudra_gpu_utilization_ratio{claim_name="",claim_namespace="",device="gpu-2",mig_profile="",node="node-a",pod_name="",pod_namespace="",uuid="GPU-c"} 0
# TYPE gpudra_gpu_memory_used_bytes gauge
gpudra_gpu_memory_used_bytes{claim_name="c",claim_namespace="ns",device="gpu-0",mig_profile="",node="node-a",pod_name="p1",pod_namespace="ns",uuid="GPU-a"} 3.4359738368e+10
gpudra_gpu_memory_used_bytes{claim_name="c",claim_namespace="ns",device="gpu-0",mig_profile="",node="node-a",pod_name="p2",pod_namespace="ns",uuid="GPU-a"} 3.4359738368e+10
gpudra_gpu_memory_used_bytes{claim_name="",claim_namespace="",device="gpu-1-mig-3g40gb-4",mig_profile="3g.40gb",node="node-a",pod_name="",pod_namespace="",uuid="MIG-b"} 5.36870912e+08
gpudra_gpu_memory_used_bytes{claim_name="",claim_namespace="",device="gpu-2",mig_profile="",node="node-a",pod_name="",pod_namespace="",uuid="GPU-c"} 0
# TYPE gpudra_plugin_prepared_claims gauge
gpudra_plugin_prepared_claims 1
`

func TestParseUsageAndPrint(t *testing.T) {
	usage, err := ParseUsage(strings.NewReader(metricsText))
	require.NoError(t, err)
	assert.Equal(t, map[string]Usage{
		"gpu-0":              {Utilization: ptr.To(0.87), MemoryUsed: ptr.To(32.0 * (1 << 30))},
		"gpu-1-mig-3g40gb-4": {MemoryUsed: ptr.To(512.0 * (1 << 20))},
		"gpu-2":              {Utilization: ptr.To(0.0), MemoryUsed: ptr.To(0.0)},
	}, usage)
	_, err = ParseUsage(strings.NewReader("not { metrics"))
	assert.Error(t, err)

	devices := []Device{{Node: "node-a", Name: "gpu-0", Memory: "80Gi", Health: Healthy},
		{Node: "node-a", Name: "gpu-1-mig-3g40gb-4", Memory: "40Gi", Health: Healthy},
		{Node: "node-b", Name: "gpu-0", Memory: "80Gi", Health: Healthy}}
	Annotate(devices, map[string]map[string]Usage{"node-a": usage})
	var buf bytes.Buffer
	require.NoError(t, Print(&buf, devices, "table"))
	lines := strings.Split(buf.String(), "\n")
	assert.Regexp(t, `^NODE\s+DEVICE\s+TYPE\s+MODEL\s+MEMORY\s+USED\s+UTIL\s+HEALTH`, lines[0])
	assert.Regexp(t, `^node-a\s+gpu-0\s.*80Gi\s+32\.0Gi\s+87%\s+Healthy`, lines[1])
	assert.Regexp(t, `^node-a\s+gpu-1-mig-3g40gb-4\s.*40Gi\s+512Mi\s+-\s+Healthy`, lines[2], "no utilization yet")
	assert.Regexp(t, `^node-b\s+gpu-0\s.*80Gi\s+-\s+-\s+Healthy`, lines[3], "no telemetry of that node")
	buf.Reset()
	require.NoError(t, Print(&buf, devices[:1], "json"))
	assert.Contains(t, buf.String(), `"usage": {`)
	assert.Contains(t, buf.String(), `"utilization": 0.87`)
}

func TestScrapeURLs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Has("huge") {
			_, _ = w.Write(hugeMetrics())
			return
		}
		_, _ = io.WriteString(w, metricsText)
	}))
	defer srv.Close()
	usage, errs := ScrapeURLs(context.Background(), map[string]string{"node-a": srv.URL + "/metrics", "node-b": srv.URL + "/nothing",
		"node-c": srv.URL + "/metrics?huge"})
	require.Contains(t, usage, "node-a")
	assert.Equal(t, 0.87, *usage["node-a"]["gpu-0"].Utilization)
	assert.ErrorContains(t, errs["node-b"], "404")
	assert.ErrorContains(t, errs["node-c"], "larger than 4 MiB")
}

// hugeMetrics is valid metrics text just over MaxMetricsBytes.
func hugeMetrics() []byte {
	line := []byte(metricUtilization + `{device="gpu-0"} 0.5` + "\n")
	return bytes.Repeat(line, MaxMetricsBytes/len(line)+1)
}

// proxyResponse answers a pod proxy request with fixed bytes.
type proxyResponse struct {
	body []byte
	err  error
}

func (p proxyResponse) DoRaw(context.Context) ([]byte, error) { return p.body, p.err }
func (p proxyResponse) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(p.body)), p.err
}

func pluginPod(name, node string, port int32, created time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpudra-system", Name: name, CreationTimestamp: metav1.NewTime(created),
		Labels: map[string]string{"app.kubernetes.io/part-of": "gpudra", "app.kubernetes.io/component": "kubelet-plugin"}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "plugin"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if port != 0 {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: port}}
	}
	return p
}

func TestScrapePlugins(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	client := fake.NewClientset(
		pluginPod("plugin-old", "node-a", 8081, t0), pluginPod("plugin-new", "node-a", 8081, t0.Add(time.Hour)),
		pluginPod("plugin-b", "node-b", 8081, t0), pluginPod("plugin-c", "node-c", 0, t0),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer"}, Spec: corev1.PodSpec{NodeName: "node-a"}},
	)
	var asked []string
	client.AddProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		get := a.(k8stesting.ProxyGetAction)
		asked = append(asked, get.GetName()+":"+get.GetPort()+get.GetPath())
		if get.GetName() == "plugin-b" {
			return true, proxyResponse{err: errors.New("forbidden")}, nil
		}
		return true, proxyResponse{body: []byte(metricsText)}, nil
	})
	usage, errs, err := ScrapePlugins(context.Background(), client, DefaultPluginNamespace)
	require.NoError(t, err)
	assert.Equal(t, []string{"plugin-new:8081/metrics", "plugin-b:8081/metrics"}, asked, "the newest plugin of a node, numeric port")
	assert.Equal(t, 0.87, *usage["node-a"]["gpu-0"].Utilization)
	assert.ErrorContains(t, errs["node-b"], "pods/proxy")
	assert.ErrorContains(t, errs["node-c"], "metricsPort")
	assert.NotContains(t, errs, "node-a")
}

// TestScrapePluginsTrust: only plugin pods of the release namespace are
// read, and an answer larger than MaxMetricsBytes is an error, not memory
// the CLI keeps.
func TestScrapePluginsTrust(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	decoy := pluginPod("decoy", "node-a", 8081, t0.Add(time.Hour)) // newer than the real one
	decoy.Namespace = "ml"
	tests := []struct {
		name      string
		pods      []runtime.Object
		answers   map[string][]byte
		wantUtil  map[string]float64
		wantErrs  map[string]string
		wantAsked []string
	}{
		{name: "decoy pod in another namespace is ignored",
			pods:     []runtime.Object{pluginPod("plugin-a", "node-a", 8081, t0), decoy},
			answers:  map[string][]byte{"decoy": []byte(metricUtilization + `{device="gpu-0"} 0.01` + "\n")},
			wantUtil: map[string]float64{"node-a": 0.87}, wantAsked: []string{"plugin-a"}},
		{name: "only a decoy: nothing read",
			pods: []runtime.Object{decoy}, wantAsked: nil},
		{name: "oversized answer",
			pods:     []runtime.Object{pluginPod("plugin-a", "node-a", 8081, t0)},
			answers:  map[string][]byte{"plugin-a": hugeMetrics()},
			wantErrs: map[string]string{"node-a": "larger than 4 MiB"}, wantAsked: []string{"plugin-a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.pods...)
			var asked []string
			client.AddProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
				get := a.(k8stesting.ProxyGetAction)
				asked = append(asked, get.GetName())
				if body, ok := tc.answers[get.GetName()]; ok {
					return true, proxyResponse{body: body}, nil
				}
				return true, proxyResponse{body: []byte(metricsText)}, nil
			})
			usage, errs, err := ScrapePlugins(context.Background(), client, DefaultPluginNamespace)
			require.NoError(t, err)
			assert.Equal(t, tc.wantAsked, asked)
			util := map[string]float64{}
			for node, u := range usage {
				util[node] = *u["gpu-0"].Utilization
			}
			if tc.wantUtil == nil {
				tc.wantUtil = map[string]float64{}
			}
			assert.Equal(t, tc.wantUtil, util)
			assert.Len(t, errs, len(tc.wantErrs))
			for node, msg := range tc.wantErrs {
				assert.ErrorContains(t, errs[node], msg)
			}
		})
	}
	_, _, err := ScrapePlugins(context.Background(), fake.NewClientset(), "")
	assert.ErrorContains(t, err, "--plugin-namespace")
}
