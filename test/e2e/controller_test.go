//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// The chart's controller runs all the time; its webhook refuses the invalid
// claims of every namespace but kube-system.
const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "gpudra-controller"
	modelLabel     = "gpudra.io/managed"
	h200Node       = "gpu-h200"
	h200Class      = "h200.gpu.gpudra.io"
)

// claimWithConfig is a ResourceClaim (or, with template: true, a
// ResourceClaimTemplate) with one request "gpu" and one opaque config.
func claimWithConfig(name, configDriver, params string, template bool) string {
	spec := `
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.gpudra.io}
    config:
    - requests: [gpu]
      opaque:
        driver: ` + configDriver + `
        parameters: ` + params
	if template {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: " + name + "}\nspec:\n  spec:" +
			strings.ReplaceAll(spec, "\n", "\n  ")
	}
	return "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: " + name + "}\nspec:" + spec
}

const (
	badParams  = `{apiVersion: resource.gpudra.io/v1alpha1, kind: GpuClaimParameters, sharing: {strategy: Sometimes}}`
	goodParams = `{apiVersion: resource.gpudra.io/v1alpha1, kind: GpuClaimParameters, sharing: {strategy: TimeSlicing, timeSlicing: {interval: Short}}}`
)

// TestController tests the chart's controller pod: its webhook reached by
// the API server through the Service, the DeviceClasses it keeps as nodes
// come and go.
func TestController(t *testing.T) {
	lockControllerTests(t)
	ns := namespace(t)
	// First: a restart resets the metrics that the last subtest reads.
	t.Run("stopped and started", func(t *testing.T) { testControllerStopStart(t, ns) })
	metricsURL := controllerMetricsURL(t)
	waitWebhookEffective(t, ns)

	t.Run("webhook", func(t *testing.T) { testWebhook(t, ns) })
	t.Run("webhook for DeviceClasses", testDeviceClassWebhook)
	t.Run("per-model classes", func(t *testing.T) { testModelClasses(t, ns) })
	t.Run("class follows node", func(t *testing.T) { testClassFollowsNode(t, ns) })
	t.Run("extended resource", func(t *testing.T) { testExtendedResource(t, ns) })
	t.Run("metrics", func(t *testing.T) { testMetrics(t, metricsURL) })
}

// lockControllerTests keeps two test processes on the shared cluster from
// starting and stopping the one controller (and adding the same node) at
// the same time.
func lockControllerTests(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(clusterDir, "controller-e2e.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("open the controller test lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", f.Name(), err)
	}
	t.Cleanup(func() { _ = f.Close() })
}

// controllerMetricsURL is the /metrics URL of the chart's controller pod.
func controllerMetricsURL(t testing.TB) string {
	t.Helper()
	url, err := realCluster.ControllerMetricsURL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// waitWebhookEffective waits until a server-side dry run of a bad claim is
// denied: with failurePolicy Ignore, the API server lets claims through until
// it has the caBundle the controller writes.
func waitWebhookEffective(t testing.TB, ns string) {
	t.Helper()
	claim := decodeClaim(t, claimWithConfig("probe", driver, badParams, false))
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, lastErr = client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return lastErr != nil && strings.Contains(lastErr.Error(), "sharing.strategy"), nil
	})
	if err != nil {
		t.Fatalf("the webhook never rejected an invalid claim (last result: %v); see _output/cluster/logs/gpu-controller.log", lastErr)
	}
}

func testWebhook(t *testing.T, ns string) {
	out, err := kubectlApply(t, ns, claimWithConfig("bad-claim", driver, badParams, false))
	if err == nil {
		t.Fatalf("kubectl apply of a claim with sharing.strategy Sometimes succeeded:\n%s", out)
	}
	for _, want := range []string{`admission webhook "claimparameters.gpu.gpudra.io" denied`, "ResourceClaim " + ns + "/bad-claim",
		"spec.devices.config[0] (requests: gpu)", "sharing.strategy", `"Sometimes"`, `"Exclusive", "TimeSlicing"`} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl's error should contain %q:\n%s", want, out)
		}
	}
	if _, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), "bad-claim", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the rejected claim exists: %v", err)
	}

	tmpl := &resourceapi.ResourceClaimTemplate{}
	if err := yaml.UnmarshalStrict([]byte(claimWithConfig("bad-template", driver, badParams, true)), tmpl); err != nil {
		t.Fatal(err)
	}
	_, err = client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("creating a template with bad parameters: want a 400 from the webhook, got %v", err)
	}
	for _, want := range []string{"ResourceClaimTemplate " + ns + "/bad-template", "spec.spec.devices.config[0] (requests: gpu)",
		"sharing.strategy", `"Exclusive", "TimeSlicing"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the template's rejection should contain %q: %v", want, err)
		}
	}

	for name, manifest := range map[string]string{
		"good-claim":          claimWithConfig("good-claim", driver, goodParams, false),
		"good-template":       claimWithConfig("good-template", driver, goodParams, true),
		"other-driver-config": claimWithConfig("other-driver-config", "example.com", `{anything: [goes, here]}`, false),
	} {
		if out, err := kubectlApply(t, ns, manifest); err != nil {
			t.Errorf("%s must be accepted: %v\n%s", name, err, out)
		}
	}
}

// modelPod is a pod whose claim asks for the per-model class CLASS, no CEL.
const modelPod = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: by-class}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: CLASS}
---
apiVersion: v1
kind: Pod
metadata: {name: by-model}
spec:
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: by-class}
`

func testModelClasses(t *testing.T, ns string) {
	for class, product := range map[string]string{
		"h100-80gb-hbm3.gpu.gpudra.io": "NVIDIA H100 80GB HBM3",
		"l4.gpu.gpudra.io":             "NVIDIA L4",
		"a100-sxm4-40gb.gpu.gpudra.io": "NVIDIA A100-SXM4-40GB",
	} {
		c := waitClass(t, class, true)
		if c.Labels[managedByLabel] != managedBy || c.Labels[modelLabel] != "true" || c.Annotations["gpudra.io/product-name"] != product {
			t.Errorf("class %s: labels %v, annotations %v; want %s=%s, %s=true, product %q",
				class, c.Labels, c.Annotations, managedByLabel, managedBy, modelLabel, product)
		}
	}
	applyYAML(t, ns, strings.ReplaceAll(modelPod, "CLASS", "h100-80gb-hbm3.gpu.gpudra.io"))
	waitRunning(t, ns, "by-model")
	d := assertSeesAllocation(t, ns, "by-model", "cuda")
	if len(d) != 1 || d[0].product != "NVIDIA H100 80GB HBM3" {
		t.Errorf("deviceClassName h100-80gb-hbm3.gpu.gpudra.io gave %+v", d)
	}
	deletePod(t, ns, "by-model")
}

// testClassFollowsNode adds an H200 node: its model class appears; removing
// the node removes the class, but only once no claim references it.
func testClassFollowsNode(t *testing.T, ns string) {
	t.Cleanup(func() { clusterCmd(t, "remove-node", h200Node) })
	clusterCmd(t, "add-node", h200Node+"=h200")
	waitClass(t, h200Class, true)
	clusterCmd(t, "remove-node", h200Node)
	waitClass(t, h200Class, false)

	clusterCmd(t, "add-node", h200Node+"=h200")
	waitClass(t, h200Class, true)
	claim := decodeClaim(t, claimWithConfig("wants-h200", driver, goodParams, false))
	claim.Spec.Devices.Requests[0].Exactly.DeviceClassName = h200Class
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterCmd(t, "remove-node", h200Node)
	waitSliceDevices(t, h200Node, 0)
	// Give the controller time to (wrongly) delete it.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if _, err := client.ResourceV1().DeviceClasses().Get(context.Background(), h200Class, metav1.GetOptions{}); err != nil {
			t.Fatalf("class %s must stay while claim %s/wants-h200 references it: %v", h200Class, ns, err)
		}
	}
	if err := client.ResourceV1().ResourceClaims(ns).Delete(context.Background(), "wants-h200", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClass(t, h200Class, false)
}

// testExtendedResource: a device-plugin style pod gets a GPU through the
// gpu.gpudra.io class the controller manages (adopted from deployments/static
// without a NameConflict).
func testExtendedResource(t *testing.T, ns string) {
	c := waitClass(t, "gpu.gpudra.io", true)
	if c.Labels[managedByLabel] != managedBy || c.Spec.ExtendedResourceName == nil || *c.Spec.ExtendedResourceName != "nvidia.com/gpu" {
		t.Errorf("gpu.gpudra.io: labels %v, extendedResourceName %v", c.Labels, c.Spec.ExtendedResourceName)
	}
	evs, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=NameConflict"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "DeviceClass" {
			t.Errorf("the controller reported a conflict: %s", e.Message)
		}
	}
	applySpec(t, ns, spec("07-extended-resource.yaml"))
	waitRunning(t, ns, "legacy-device-plugin-pod")
	if d := assertSeesAllocation(t, ns, "legacy-device-plugin-pod", "cuda"); len(d) != 1 {
		t.Fatalf("nvidia.com/gpu: 1 should give one GPU, got %v", d)
	}
	deletePod(t, ns, "legacy-device-plugin-pod")
}

func testMetrics(t *testing.T, url string) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ResourceClaim", "ResourceClaimTemplate", "DeviceClass"} {
		m := regexp.MustCompile(`(?m)^gpudra_webhook_admission_decisions_total\{decision="denied",kind="` + kind + `"\} (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Errorf("no denied %s decisions in %s:\n%s", kind, url, body)
			continue
		}
		if n, err := strconv.ParseFloat(string(m[1]), 64); err != nil || n < 1 {
			t.Errorf("denied %s decisions = %s, want >= 1", kind, m[1])
		}
	}
	m := regexp.MustCompile(`(?m)^gpudra_controller_reconciles_total\{result="success"\} (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Errorf("no successful DeviceClass reconciles in %s", url)
	} else if n, err := strconv.ParseFloat(string(m[1]), 64); err != nil || n < 1 {
		t.Errorf("successful reconciles = %s, want >= 1", m[1])
	}
}

// kubectlApply applies a manifest into ns and returns kubectl's output.
func kubectlApply(t testing.TB, ns, manifest string) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubectl("-n", ns, "apply", "-f", f)
}

func decodeClaim(t testing.TB, manifest string) *resourceapi.ResourceClaim {
	t.Helper()
	c := &resourceapi.ResourceClaim{}
	if err := yaml.UnmarshalStrict([]byte(manifest), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitClass waits until a DeviceClass exists (or is gone) and returns it.
func waitClass(t *testing.T, name string, exists bool) *resourceapi.DeviceClass {
	t.Helper()
	var c *resourceapi.DeviceClass
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		c, err = client.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
		return (err == nil) == exists && (err == nil || apierrors.IsNotFound(err)), nil
	})
	if err != nil {
		out, _ := kubectl("get", "deviceclasses,resourceslices")
		t.Fatalf("DeviceClass %s: want exists=%v within 30s\n%s", name, exists, out)
	}
	return c
}

// testControllerStopStart: with the controller Deployment scaled to zero
// nothing answers behind the webhook's Service, and the chart's
// failurePolicy Ignore admits an invalid claim unchecked (the plugin checks
// it at prepare); scaled back, the webhook refuses it again.
func testControllerStopStart(t *testing.T, ns string) {
	t.Cleanup(func() { clusterCmd(t, "start-controller") }) // a no-op once started
	clusterCmd(t, "stop-controller")
	claim := decodeClaim(t, claimWithConfig("unchecked", driver, badParams, false))
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(context.Background(), claim, metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Errorf("with no controller pod, failurePolicy Ignore must admit the claim unchecked: %v", err)
	}
	if _, err := client.ResourceV1().DeviceClasses().Get(context.Background(), "gpu.gpudra.io", metav1.GetOptions{}); err != nil {
		t.Errorf("the DeviceClasses must stay while the controller is down: %v", err)
	}
	start := time.Now()
	clusterCmd(t, "start-controller") // waits until the webhook refuses an invalid claim
	t.Logf("controller back, webhook refusing through its Service, in %v", time.Since(start).Round(time.Millisecond))
	waitWebhookEffective(t, ns)
}
