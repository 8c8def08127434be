//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Checks of the chart's monitoring renderings (TestHelmChartDryRun).

// checkMonitoring: the plugin's metrics port is named for the monitors,
// which select the plugin pods; the dashboard ConfigMap carries the
// sidecar's label and the chart's dashboard JSON; the telemetry values
// reach the plugin's flags; nothing scrapes with TLS or a token by default.
func checkMonitoring(t *testing.T, _ string, objs []*unstructured.Unstructured) {
	ctr := pluginDaemonSet(t, objs).Spec.Template.Spec.Containers[0]
	if len(ctr.Ports) != 1 || ctr.Ports[0].Name != "metrics" || ctr.Ports[0].ContainerPort != 8081 {
		t.Errorf("plugin ports %+v, want metrics 8081", ctr.Ports)
	}
	for _, arg := range []string{"--telemetry-interval=15s", "--telemetry-workload-labels=false"} {
		if !slices.Contains(ctr.Args, arg) {
			t.Errorf("plugin args %v lack %s", ctr.Args, arg)
		}
	}
	for _, kind := range []string{"PodMonitor", "ServiceMonitor"} {
		m := find(objs, kind)
		if len(m) != 1 {
			t.Fatalf("%d %ss rendered, want 1", len(m), kind)
		}
		sel, _, _ := unstructured.NestedStringMap(m[0].Object, "spec", "selector", "matchLabels")
		if sel["app.kubernetes.io/component"] != "kubelet-plugin" {
			t.Errorf("%s selects %v, want the plugin pods", kind, sel)
		}
		if scheme := fmt.Sprint(m[0].Object["spec"]); strings.Contains(scheme, "https") || strings.Contains(scheme, "authorization") {
			t.Errorf("%s scrapes with TLS or a token without kubeletPlugin.metrics.authentication: %s", kind, scheme)
		}
	}
	cms := find(objs, "ConfigMap")
	if len(cms) != 1 || cms[0].GetLabels()["grafana_dashboard"] != "1" {
		t.Fatalf("dashboard ConfigMaps %v, want one labelled grafana_dashboard=1", cms)
	}
	data, _, _ := unstructured.NestedString(cms[0].Object, "data", "gpudra-gpus.json")
	want, err := os.ReadFile(filepath.Join(chartDir(), "dashboards", "gpudra-gpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal([]byte(data), &dash); err != nil || strings.TrimSpace(data) != strings.TrimSpace(string(want)) {
		t.Errorf("the ConfigMap does not hold the chart's dashboard (%v)", err)
	}
}

// checkMetricsAuth checks the chart's rendering with
// kubeletPlugin.metrics.authentication and both monitors on (release
// "gpudra", TestHelmChartDryRun).
func checkMetricsAuth(t *testing.T, ns string, objs []*unstructured.Unstructured) {
	ds := pluginDaemonSet(t, objs)
	ctr := ds.Spec.Template.Spec.Containers[0]
	if !slices.Contains(ctr.Args, "--metrics-secure") {
		t.Errorf("plugin args %v lack --metrics-secure", ctr.Args)
	}
	for probe, p := range map[string]*corev1.Probe{"readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v: want an HTTPS GET", probe, p)
		}
	}
	reader, scraper := "gpudra-kubelet-plugin-metrics-reader", "gpudra-kubelet-plugin-metrics-scraper"
	for _, o := range find(objs, "ClusterRole") {
		if o.GetName() != reader {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		want := []any{map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}}
		if fmt.Sprint(rules) != fmt.Sprint(want) {
			t.Errorf("ClusterRole %s rules %v, want %v", reader, rules, want)
		}
		reader = ""
	}
	if reader != "" {
		t.Errorf("no ClusterRole %s rendered", reader)
	}
	found := 0
	for _, o := range find(objs, "ClusterRoleBinding") {
		if o.GetName() != scraper {
			continue
		}
		found++
		ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if ref != "gpudra-kubelet-plugin-metrics-reader" || fmt.Sprint(subjects) != fmt.Sprint([]any{map[string]any{"kind": "ServiceAccount", "name": scraper, "namespace": ns}}) {
			t.Errorf("ClusterRoleBinding %s binds %v to %s", scraper, subjects, ref)
		}
	}
	for _, o := range find(objs, "Secret") {
		if o.GetName() == scraper {
			found++
			if typ, _, _ := unstructured.NestedString(o.Object, "type"); typ != string(corev1.SecretTypeServiceAccountToken) ||
				o.GetAnnotations()[corev1.ServiceAccountNameKey] != scraper {
				t.Errorf("Secret %s: type %s, annotations %v; want a token of ServiceAccount %s", scraper, typ, o.GetAnnotations(), scraper)
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d of the scraper's ClusterRoleBinding and token Secret, want both", found)
	}
	for kind, field := range map[string]string{"PodMonitor": "podMetricsEndpoints", "ServiceMonitor": "endpoints"} {
		for _, m := range find(objs, kind) {
			eps, _, _ := unstructured.NestedSlice(m.Object, "spec", field)
			ep := eps[0].(map[string]any)
			scheme, _, _ := unstructured.NestedString(ep, "scheme")
			skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify")
			secret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
			if scheme != "https" || !skip || secret != scraper {
				t.Errorf("%s endpoint %v: want https, insecureSkipVerify and the token of %s", kind, ep, scraper)
			}
		}
	}
}
