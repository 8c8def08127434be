//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/controller/deviceclass"
)

// The chart tests render deployments/helm/gpudra with helm template and let
// the real API server judge each rendering (kubectl apply --dry-run=server):
// schema, defaulting, validation of every object, CEL of the admission policy.
// Nothing is persisted except in TestHelmPluginAdmissionPolicy, which installs
// the plugin's RBAC and admission policy under a unique name to try them.

func chartDir() string { return filepath.Join(repoRoot, "deployments", "helm", "gpudra") }

// helmTemplate renders the chart and decodes the objects.
func helmTemplate(t *testing.T, release, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelmTemplate(release, ns, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	return decodeObjects(t, out)
}

func runHelmTemplate(release, ns string, args ...string) (string, error) {
	helm := filepath.Join(repoRoot, "_output", "tools", "helm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, append([]string{"template", release, chartDir(), "--namespace", ns}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.String(), err
	}
	return string(out), nil
}

func skipWithoutHelm(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot, "_output", "tools", "helm")); err != nil {
		t.Skipf("no _output/tools/helm (%v): make e2e builds it, or run make %s/_output/tools/helm", err, repoRoot)
	}
}

func decodeObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decode rendered manifest: %v", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// dryRunApply sends the objects to the API server as one List, persisting
// nothing.
func dryRunApply(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	path := writeList(t, objs)
	out, err := kubectl("apply", "--dry-run=server", "-f", path)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
	}
	return out
}

func writeList(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	items := make([]any, len(objs))
	for i, o := range objs {
		items[i] = o.Object
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "objects.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// find returns the objects of a kind; convert turns one into its type.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func convert[T any](t *testing.T, objs []*unstructured.Unstructured, kind string) *T {
	t.Helper()
	found := find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("rendered %d objects of kind %s, want 1", len(found), kind)
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, &out); err != nil {
		t.Fatalf("convert %s: %v", kind, err)
	}
	return &out
}

// privilegedAllowed reports whether the API server admits privileged pods
// (kube-apiserver --allow-privileged; real clusters set it, the local one
// may not).
func privilegedAllowed(t *testing.T, ns string) bool {
	t.Helper()
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"privileged-probe","namespace":"` + ns + `"},` +
		`"spec":{"containers":[{"name":"c","image":"busybox","securityContext":{"privileged":true}}]}}`
	path := filepath.Join(t.TempDir(), "probe.json")
	if err := os.WriteFile(path, []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := kubectl("create", "--dry-run=server", "-f", path)
	if err != nil && strings.Contains(out, "disallowed by cluster policy") {
		return false
	}
	if err != nil {
		t.Fatalf("probe for privileged pods: %v\n%s", err, out)
	}
	return true
}

func pluginDaemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	return convert[appsv1.DaemonSet](t, objs, "DaemonSet")
}

// unprivilege drops privileged from the plugin DaemonSet when the API server
// would refuse it, so that the rest of the rendering is still checked.
func unprivilege(t *testing.T, ns string, objs []*unstructured.Unstructured) {
	t.Helper()
	privileged := false
	for _, o := range find(objs, "DaemonSet") {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			p, _, _ := unstructured.NestedBool(c.(map[string]any), "securityContext", "privileged")
			privileged = privileged || p
		}
	}
	if !privileged || privilegedAllowed(t, ns) {
		return
	}
	t.Log("the API server refuses privileged pods (no --allow-privileged=true); checking the DaemonSet without privileged")
	for _, o := range find(objs, "DaemonSet") {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if sc, ok := c.(map[string]any)["securityContext"].(map[string]any); ok {
				delete(sc, "privileged")
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHelmChartDryRun(t *testing.T) {
	skipWithoutHelm(t)
	simulated := filepath.Join(chartDir(), "values-simulated.yaml")
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, ns string, objs []*unstructured.Unstructured)
	}{
		{"default", nil, checkDefault},
		{"simulated", []string{"--values", simulated}, checkSimulated},
		{"certManager", []string{"--set", "controller.certMode=certManager"}, checkCertManager},
		{"secret", []string{"--set", "controller.certMode=secret,controller.certSecretName=my-tls,controller.webhook.caBundle=Zm9v"}, checkSecretMode},
		{"webhook-fail", []string{"--set", "controller.webhook.failurePolicy=Fail"}, func(t *testing.T, _ string, objs []*unstructured.Unstructured) {
			if p := convert[admissionv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration").Webhooks[0].FailurePolicy; p == nil || *p != admissionv1.Fail {
				t.Errorf("webhook failurePolicy %v, want Fail", p)
			}
		}},
		{"controller-disabled", []string{"--values", simulated, "--set", "controller.enabled=false"}, checkStaticClasses},
		{"monitoring", []string{"--set", "monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true," +
			"monitoring.grafanaDashboard.enabled=true,kubeletPlugin.telemetry.interval=15s,kubeletPlugin.telemetry.workloadLabels=false"}, checkMonitoring},
		{"metrics-authentication", []string{"--set", metricsAuthValue + ",monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true"}, checkMetricsAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			objs := helmTemplate(t, "gpudra", ns, tc.args...)
			tc.check(t, ns, objs)
			// cert-manager's and the Prometheus Operator's CRDs are not
			// installed: the check above has looked at their objects, the
			// API server does not get them.
			objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
				return strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") ||
					strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/")
			})
			unprivilege(t, ns, objs)
			out := dryRunApply(t, objs)
			if n := strings.Count(out, "(server dry run)"); n != len(objs) {
				t.Errorf("the API server accepted %d of %d objects:\n%s", n, len(objs), out)
			}
		})
	}
}

func TestHelmChartRefusesBadValues(t *testing.T) {
	skipWithoutHelm(t)
	for _, tc := range []struct{ set, want string }{
		{"controller.certMode=secret", "needs controller.certSecretName"},
		{"controller.certMode=vault", "must be selfManaged, certManager or secret"},
		{"controller.webhook.failurePolicy=Maybe", "must be Ignore or Fail"},
		{"controller.leaderElection=false", "needs controller.leaderElection"},
		{"monitoring.podMonitor.enabled=true,kubeletPlugin.metricsPort=0", "need kubeletPlugin.metricsPort"},
		{metricsAuthValue + ",kubeletPlugin.metricsPort=0", "kubeletPlugin.metrics.authentication needs kubeletPlugin.metricsPort"},
	} {
		out, err := runHelmTemplate("gpudra", "default", "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: err=%v, want an error containing %q; output:\n%s", tc.set, err, tc.want, out)
		}
	}
}

func checkDefault(t *testing.T, _ string, objs []*unstructured.Unstructured) {
	ds := pluginDaemonSet(t, objs)
	ctr := ds.Spec.Template.Spec.Containers[0]
	if sc := ctr.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("plugin for real GPUs is not privileged: %+v", sc)
	}
	if slices.Contains(ctr.Args, "--metrics-secure") {
		t.Errorf("plugin args %v: --metrics-secure is not the default (kubeletPlugin.metrics.authentication)", ctr.Args)
	}
	for _, want := range []string{"--nvidia-driver-root=/driver-root", "--host-driver-root=/", "--telemetry-workload-labels=true"} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("plugin args %v lack %s", ctr.Args, want)
		}
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("plugin update strategy %+v, want maxSurge 1, maxUnavailable 0", ds.Spec.UpdateStrategy)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["NODE_NAME"] != "spec.nodeName" || env["POD_UID"] != "metadata.uid" {
		t.Errorf("plugin env from the downward API %v, want NODE_NAME and POD_UID", env)
	}
	checkControllerArgs(t, objs, "--cert-mode=self-managed", "--extended-resource-name=nvidia.com/gpu", "--per-model-classes=true", "--max-derived-classes=64",
		"--compute-domains=true", "--compute-domain-daemon-nudge-after=5s")
	checkWebhookMirrorsRecommended(t, objs)
	if len(find(objs, "DeviceClass")) != 0 {
		t.Error("DeviceClasses rendered although the controller manages them")
	}
}

// checkSimulated: the simulated chart is the real one with a simulated
// driver root: same flags and mounts, no privileges.
func checkSimulated(t *testing.T, _ string, objs []*unstructured.Unstructured) {
	ds := pluginDaemonSet(t, objs)
	ctr := ds.Spec.Template.Spec.Containers[0]
	const root = "/var/lib/gpudra-sim/driver-root"
	for _, want := range []string{"--nvidia-driver-root=/driver-root", "--host-driver-root=" + root} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("plugin args %v lack %s", ctr.Args, want)
		}
	}
	// Like a real node, the simulated one gets the plugin's own copy of the
	// image's nvidia-cdi-hook: no hook path is set.
	for _, a := range ctr.Args {
		if strings.HasPrefix(a, "--nvidia-cdi-hook-path") {
			t.Errorf("simulated plugin has %s: the nodes have no toolkit, the plugin installs its hook", a)
		}
	}
	for _, a := range ctr.Args {
		if strings.HasPrefix(a, "--simulate") {
			t.Errorf("simulated plugin has %s: a simulated node differs only in its driver root", a)
		}
	}
	mounted := map[string]bool{}
	for _, m := range ctr.VolumeMounts {
		mounted[m.MountPath] = true
	}
	if !mounted["/driver-root"] || !mounted["/dev"] {
		t.Errorf("simulated plugin mounts %v, want /driver-root and /dev like a real one", mounted)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "driver-root" && (v.HostPath == nil || v.HostPath.Path != root) {
			t.Errorf("driver-root volume %+v, want hostPath %s", v, root)
		}
	}
	if sc := ctr.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		t.Error("simulated plugin is privileged")
	}
}

func checkControllerArgs(t *testing.T, objs []*unstructured.Unstructured, want ...string) {
	t.Helper()
	args := convert[appsv1.Deployment](t, objs, "Deployment").Spec.Template.Spec.Containers[0].Args
	for _, w := range want {
		if !slices.Contains(args, w) {
			t.Errorf("controller args %v lack %s", args, w)
		}
	}
}

func checkSecretMode(t *testing.T, _ string, objs []*unstructured.Unstructured) {
	checkControllerArgs(t, objs, "--cert-mode=secret", "--cert-secret-name=my-tls")
}

// checkCertManager asserts the cert-manager objects and the CA injection
// annotation.
func checkCertManager(t *testing.T, ns string, objs []*unstructured.Unstructured) {
	t.Helper()
	kinds := map[string]bool{}
	for _, o := range objs {
		if strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") {
			kinds[o.GetKind()] = true
		}
	}
	if !kinds["Certificate"] || !kinds["Issuer"] {
		t.Errorf("cert-manager kinds rendered: %v, want Certificate and Issuer", kinds)
	}
	vwc := convert[admissionv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration")
	if got, want := vwc.Annotations["cert-manager.io/inject-ca-from"], ns+"/gpudra-controller"; got != want {
		t.Errorf("inject-ca-from annotation %q, want %q", got, want)
	}
	checkControllerArgs(t, objs, "--cert-mode=secret", "--cert-secret-name=gpudra-webhook-tls")
}

// checkWebhookMirrorsRecommended compares the chart's webhook with the
// recommended configuration the webhook package tests.
func checkWebhookMirrorsRecommended(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "internal", "controller", "webhook", "testdata", "validatingwebhookconfiguration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want admissionv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &want); err != nil {
		t.Fatal(err)
	}
	got := convert[admissionv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration")
	if len(got.Webhooks) != 1 || len(want.Webhooks) != 1 {
		t.Fatalf("webhooks: chart %d, recommended %d; want 1 each", len(got.Webhooks), len(want.Webhooks))
	}
	g, w := got.Webhooks[0], want.Webhooks[0]
	g.ClientConfig.Service.Name, g.ClientConfig.Service.Namespace = w.ClientConfig.Service.Name, w.ClientConfig.Service.Namespace
	if !apiequality.Semantic.DeepEqual(g, w) {
		gy, _ := yaml.Marshal(g)
		wy, _ := yaml.Marshal(w)
		t.Errorf("chart webhook differs from internal/controller/webhook/testdata:\nchart:\n%s\nrecommended:\n%s", gy, wy)
	}
}

// checkStaticClasses compares the classes rendered without the controller
// with those the controller would keep.
func checkStaticClasses(t *testing.T, _ string, objs []*unstructured.Unstructured) {
	t.Helper()
	if n := len(find(objs, "Deployment")) + len(find(objs, "ValidatingWebhookConfiguration")); n != 0 {
		t.Errorf("controller disabled, yet %d controller objects rendered", n)
	}
	rendered := map[string]resourceapi.DeviceClassSpec{}
	for _, o := range find(objs, "DeviceClass") {
		var c resourceapi.DeviceClass
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &c); err != nil {
			t.Fatal(err)
		}
		rendered[c.Name] = c.Spec
	}
	want := deviceclass.BaseClasses("nvidia.com/gpu")
	if len(rendered) != len(want) {
		t.Errorf("rendered DeviceClasses %v, want %d", rendered, len(want))
	}
	for _, c := range want {
		if got, ok := rendered[c.Name]; !ok || !apiequality.Semantic.DeepEqual(got, c.Spec) {
			t.Errorf("DeviceClass %s: chart %+v, controller %+v", c.Name, got, c.Spec)
		}
	}
}
