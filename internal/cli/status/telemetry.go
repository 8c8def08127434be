package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/internal/shared/telemetry/names"
)

// Usage is what a node's plugin reports of one device in its GPU telemetry
// (the gpudra_gpu_* metrics); nil fields were not reported.
type Usage struct {
	Utilization *float64 `json:"utilization,omitempty"`
	MemoryUsed  *float64 `json:"memoryUsedBytes,omitempty"`
	MemoryTotal *float64 `json:"memoryTotalBytes,omitempty"`
}

// Metric names read from the plugins (internal/plugin/telemetry).
const (
	metricUtilization = names.MetricUtilization
	metricMemoryUsed  = names.MetricMemoryUsed
	metricMemoryTotal = names.MetricMemoryTotal
)

// PluginSelector selects the chart's kubelet plugin pods.
const PluginSelector = "app.kubernetes.io/part-of=gpudra,app.kubernetes.io/component=kubelet-plugin"

// ParseUsage reads the device usage from a plugin's /metrics (Prometheus
// text format): by device name. A device held by several claims or pods
// has one series for each, all with the device's value.
func ParseUsage(r io.Reader) (map[string]Usage, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := map[string]Usage{}
	for name, set := range map[string]func(*Usage, float64){
		metricUtilization: func(u *Usage, v float64) { u.Utilization = &v },
		metricMemoryUsed:  func(u *Usage, v float64) { u.MemoryUsed = &v },
		metricMemoryTotal: func(u *Usage, v float64) { u.MemoryTotal = &v },
	} {
		f := families[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			device := MetricLabel(m, names.LabelDevice)
			u := out[device]
			set(&u, m.GetGauge().GetValue())
			out[device] = u
		}
	}
	return out, nil
}

// MetricLabel is the value of a metric's label (empty when it has none).
func MetricLabel(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Annotate sets the usage of each device from usage (by node, then device).
func Annotate(devices []Device, usage map[string]map[string]Usage) {
	for i := range devices {
		if u, ok := usage[devices[i].Node][devices[i].Name]; ok {
			devices[i].Usage = &u
		}
	}
}

// ScrapeURLs reads /metrics from the given URL of each node (e.g. a port
// forward, or a plugin that runs outside a pod). Nodes that cannot be read
// are reported in the error map.
func ScrapeURLs(ctx context.Context, urls map[string]string) (map[string]map[string]Usage, map[string]error) {
	out, errs := map[string]map[string]Usage{}, map[string]error{}
	client := &http.Client{Timeout: 10 * time.Second}
	for node, url := range urls {
		u, err := scrapeURL(ctx, client, url)
		if err != nil {
			errs[node] = err
			continue
		}
		out[node] = u
	}
	return out, errs
}

func scrapeURL(ctx context.Context, client *http.Client, url string) (map[string]Usage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s", url, resp.Status)
	}
	body, err := readBounded(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	return ParseUsage(bytes.NewReader(body))
}

// ScrapePlugins reads /metrics of every running kubelet plugin pod of the
// chart (PluginSelector) in namespace through the API server's pod proxy:
// the user needs list on pods and get on pods/proxy there. A node with two
// plugin pods (a rolling update) is read from the newest.
func ScrapePlugins(ctx context.Context, client kubernetes.Interface, namespace string) (map[string]map[string]Usage, map[string]error, error) {
	raw, errs, err := ReadPluginMetrics(ctx, client, namespace)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]map[string]Usage{}
	for node, r := range raw {
		u, err := ParseUsage(bytes.NewReader(r.Body))
		if err != nil {
			errs[node] = fmt.Errorf("plugin pod %s: %w", r.Pod, err)
			continue
		}
		out[node] = u
	}
	return out, errs, nil
}

// PluginMetrics is one plugin pod's /metrics.
type PluginMetrics struct {
	// Pod is namespace/name of the plugin pod.
	Pod  string
	Body []byte
}

// DefaultPluginNamespace is the namespace the chart's install instructions
// use; the CLI's --plugin-namespace defaults to it.
const DefaultPluginNamespace = "gpudra-system"

// MaxMetricsBytes bounds one plugin's /metrics answer that the CLI reads.
// A plugin's driver metrics and GPU telemetry are tens of KiB; the bound
// keeps a misbehaving endpoint from exhausting the CLI's memory.
const MaxMetricsBytes = 4 << 20

// ReadPluginMetrics reads /metrics of every node's running plugin pod (the
// newest of a node's pods that answers) in namespace, the chart's release
// namespace, through the API server's pod proxy, by node. Pods with the
// plugin's labels elsewhere are not the chart's and are ignored. Nodes whose
// plugin cannot be read are in the error map.
func ReadPluginMetrics(ctx context.Context, client kubernetes.Interface, namespace string) (map[string]PluginMetrics, map[string]error, error) {
	if namespace == "" {
		return nil, nil, fmt.Errorf("no plugin namespace: set --plugin-namespace to the namespace gpudra is installed in")
	}
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: PluginSelector})
	if err != nil {
		return nil, nil, fmt.Errorf("list the gpudra plugin pods (%s) in namespace %s (needs list on pods there; "+
			"is --plugin-namespace the namespace gpudra is installed in?): %w", PluginSelector, namespace, err)
	}
	items := pods.Items
	sort.Slice(items, func(i, j int) bool { return items[j].CreationTimestamp.Before(&items[i].CreationTimestamp) })
	out, errs := map[string]PluginMetrics{}, map[string]error{}
	for _, p := range items {
		node := p.Spec.NodeName
		if _, done := out[node]; done || node == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if needsToken(&p) {
			errs[node] = fmt.Errorf("plugin pod %s/%s: %w", p.Namespace, p.Name, ErrMetricsNeedToken)
			continue
		}
		port := metricsPort(&p)
		if port == 0 {
			errs[node] = fmt.Errorf("plugin pod %s/%s has no port named metrics (kubeletPlugin.metricsPort is 0)", p.Namespace, p.Name)
			continue
		}
		raw, err := readProxied(ctx, client, &p, port)
		if err != nil {
			errs[node] = err
			continue
		}
		delete(errs, node)
		out[node] = PluginMetrics{Pod: p.Namespace + "/" + p.Name, Body: raw}
	}
	return out, errs, nil
}

// readProxied reads at most MaxMetricsBytes of the plugin pod's /metrics
// through the API server's pod proxy.
func readProxied(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, port int32) ([]byte, error) {
	stream, err := client.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, strconv.Itoa(int(port)), "/metrics", nil).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("read /metrics of plugin pod %s/%s through the API server (needs get on pods/proxy): %w",
			p.Namespace, p.Name, err)
	}
	defer func() { _ = stream.Close() }()
	body, err := readBounded(stream)
	if err != nil {
		return nil, fmt.Errorf("read /metrics of plugin pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return body, nil
}

// readBounded reads r to its end, failing if it holds more than
// MaxMetricsBytes.
func readBounded(r io.Reader) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, MaxMetricsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > MaxMetricsBytes {
		return nil, fmt.Errorf("the answer is larger than %d MiB, more than any gpudra plugin writes: "+
			"is this endpoint a gpudra plugin's /metrics?", MaxMetricsBytes>>20)
	}
	return body, nil
}

func metricsPort(p *corev1.Pod) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "metrics" {
				return port.ContainerPort
			}
		}
	}
	return 0
}
