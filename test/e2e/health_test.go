//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// faultTolerantInference is the demo's Deployment (demo/specs/09-*.yaml):
// one inference replica on the H100 node with a GPU from a template.
func faultTolerantInference(t *testing.T, ns string) v1.Pod {
	t.Helper()
	applySpec(t, ns, spec("09-fault-tolerant-inference.yaml"))
	return waitDeployment(t, ns, "app=inference", 1)[0]
}

// TestHealthXID79 breaks the GPU a running inference pod uses (XID 79, the
// GPU fell off the bus) and checks the whole chain: NoExecute taint in the
// slice, the device Unhealthy in the pod's status, eviction, a replacement
// on a healthy GPU; then repairs it and checks the GPU is allocatable again.
func TestHealthXID79(t *testing.T) {
	ns := namespace(t)
	t.Cleanup(func() { clearFaults(t, "gpu-h100") })
	old := faultTolerantInference(t, ns)
	broken := allocatedDevices(t, &old)[0]
	t.Logf("inference pod %s runs on %s (%s)", old.Name, broken.name, broken.uuid)
	sawUnhealthy := watchUnhealthy(t, ns, old.Name)

	start := time.Now()
	clusterCmd(t, "inject-fault", "gpu-h100", broken.name, "xid", "79")
	taints := waitTaints(t, "gpu-h100", broken.name, func(ts []resourceapi.DeviceTaint) bool {
		return hasTaint(ts, "gpu.gpudra.io/xid", "79", resourceapi.DeviceTaintEffectNoExecute)
	})
	t.Logf("NoExecute taint %v in the slice after %v", taints, time.Since(start))

	msg := sawUnhealthy(time.Minute)
	t.Logf("pod status showed the device Unhealthy after %v: %s", time.Since(start), msg)
	waitEvent(t, ns, "ResourceClaim", "DeviceUnhealthy")

	// The device taint eviction controller deletes the pod; the Deployment's
	// replacement gets a healthy GPU.
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		t.Fatalf("pod %s on the broken GPU was not evicted", old.Name)
	}
	repl := waitDeployment(t, ns, "app=inference", 1)[0]
	got := assertSeesAllocation(t, ns, repl.Name, "inference")
	if got[0].name == broken.name {
		t.Fatalf("replacement %s got the broken GPU %s", repl.Name, broken.name)
	}
	t.Logf("replacement %s Running on %s, %v after the fault", repl.Name, got[0].name, time.Since(start))

	out := gpudraStatus(t, "gpu-h100")
	if !regexp.MustCompile(`(?m)^gpu-h100\s+` + broken.name + `\s.*Unhealthy\s+\S*gpu.gpudra.io/xid=79:NoExecute`).MatchString(out) {
		t.Errorf("gpudra status does not show %s Unhealthy with the XID taint:\n%s", broken.name, out)
	}

	// Repair: the taints go, and the GPU can be allocated again.
	clearFaults(t, "gpu-h100")
	applyYAML(t, ns, strings.NewReplacer("UUID", broken.uuid).Replace(`
apiVersion: v1
kind: Pod
metadata: {name: on-repaired-gpu}
spec:
  nodeSelector: {kubernetes.io/hostname: gpu-h100}
  containers:
  - {name: cuda, image: nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04, resources: {claims: [{name: gpu}]}}
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: the-repaired-gpu}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: the-repaired-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.gpudra.io
          selectors:
          - cel: {expression: 'device.attributes["gpu.gpudra.io"].uuid == "UUID"'}
`))
	waitRunning(t, ns, "on-repaired-gpu")
	assertSeesAllocation(t, ns, "on-repaired-gpu", "cuda")
}

// TestHealthIgnoredXID injects an application XID: the plugin counts it as
// ignored, and nothing is tainted.
func TestHealthIgnoredXID(t *testing.T) {
	t.Cleanup(func() { clearFaults(t, "gpu-h100") })
	before := metricValue(t, "gpu-h100", `gpudra_plugin_health_events_total{action="ignored",type="xid",xid="13"}`)
	clusterCmd(t, "inject-fault", "gpu-h100", "gpu-5", "xid", "13")
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return metricValue(t, "gpu-h100", `gpudra_plugin_health_events_total{action="ignored",type="xid",xid="13"}`) > before, nil
	})
	if err != nil {
		t.Fatal("the plugin never counted the injected XID 13 as ignored")
	}
	// The event is handled; a full probe round of the 8 GPUs afterwards must
	// not taint anything either.
	const probes = `gpudra_plugin_nvml_call_duration_seconds_count{call="GetMemoryInfo"}`
	n := metricValue(t, "gpu-h100", probes)
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return metricValue(t, "gpu-h100", probes) >= n+8, nil
	}); err != nil {
		t.Fatal("no probe round after the XID")
	}
	for _, d := range sliceDeviceTaints(t, "gpu-h100") {
		if len(d.Taints) > 0 {
			t.Errorf("ignored XID 13 tainted %s: %v", d.Name, d.Taints)
		}
	}
}

// TestClaimDeviceStatus checks status.devices of a claim: written after
// prepare with the GPU's data, removed after unprepare.
func TestClaimDeviceStatus(t *testing.T) {
	ns := namespace(t)
	applyYAML(t, ns, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: status-claim}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.gpudra.io
        selectors:
        - cel: {expression: 'device.attributes["gpu.gpudra.io"].productName == "NVIDIA H100 80GB HBM3"'}
---
apiVersion: v1
kind: Pod
metadata: {name: status-pod}
spec:
  containers:
  - {name: cuda, image: nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04, resources: {claims: [{name: gpu}]}}
  resourceClaims:
  - {name: gpu, resourceClaimName: status-claim}
`)
	waitRunning(t, ns, "status-pod")
	dev := allocatedDevices(t, pod(t, ns, "status-pod"))[0]
	var st []resourceapi.AllocatedDeviceStatus
	waitClaimStatus := func(want int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, "status-claim", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			st = c.Status.Devices
			return len(st) == want, nil
		})
		if err != nil {
			t.Fatalf("claim status.devices: want %d entries, have %+v", want, st)
		}
	}
	waitClaimStatus(1)
	var data map[string]string
	if err := json.Unmarshal(st[0].Data.Raw, &data); err != nil {
		t.Fatalf("status.devices[0].data: %v", err)
	}
	if st[0].Driver != driver || st[0].Device != dev.name || data["uuid"] != dev.uuid ||
		data["productName"] != dev.product || data["health"] != "Healthy" {
		t.Errorf("status.devices[0] = %s/%s/%s %v; want device %s, uuid %s, product %s, Healthy",
			st[0].Driver, st[0].Pool, st[0].Device, data, dev.name, dev.uuid, dev.product)
	}
	t.Logf("status.devices[0]: %s/%s %s", st[0].Pool, st[0].Device, st[0].Data.Raw)
	deletePod(t, ns, "status-pod")
	waitClaimStatus(0)
}

// TestPluginMetrics scrapes a plugin's /metrics after pods ran: the
// prepare histogram has observations and buckets below 1 ms.
func TestPluginMetrics(t *testing.T) {
	ns := namespace(t)
	podWithClaim(t, ns, "metrics-pod")
	deletePod(t, ns, "metrics-pod")
	body := scrape(t, "gpu-h100")
	for _, want := range []string{
		`gpudra_plugin_prepare_duration_seconds_count{result="success"}`,
		`gpudra_plugin_unprepare_duration_seconds_count{result="success"}`,
	} {
		if v := metricIn(body, want); v < 1 {
			t.Errorf("%s = %v, want >= 1", want, v)
		}
	}
	for _, want := range []string{`gpudra_plugin_prepare_duration_seconds_bucket{result="success",le="0.0001"}`,
		`gpudra_plugin_devices_by_health{health="Healthy"}`, `gpudra_plugin_nvml_call_duration_seconds_count{call="GetMemoryInfo"}`} {
		if metricIn(body, want) < 0 {
			t.Errorf("metric %s missing", want)
		}
	}
}

// waitEvent waits for an events.k8s.io Event of the plugin with reason on
// an object of kind in ns.
func waitEvent(t *testing.T, ns, kind, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.Regarding.Kind == kind && e.ReportingController == driver+"/kubelet-plugin" {
				t.Logf("event on %s %s: %s %s", kind, e.Regarding.Name, e.Reason, e.Note)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s event on a %s in %s", reason, kind, ns)
	}
}

// --- helpers ------------------------------------------------------------------

func clearFaults(t *testing.T, node string) {
	t.Helper()
	clusterCmd(t, "clear-faults", node)
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, d := range sliceDeviceTaints(t, node) {
			if len(d.Taints) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("taints of %s still present after clearing the faults: %v", node, sliceDeviceTaints(t, node))
	}
}

func sliceDeviceTaints(t *testing.T, node string) []resourceapi.Device {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.Device
	for _, s := range list.Items {
		if s.Spec.Driver == driver {
			out = append(out, s.Spec.Devices...)
		}
	}
	return out
}

func waitTaints(t *testing.T, node, device string, ok func([]resourceapi.DeviceTaint) bool) []resourceapi.DeviceTaint {
	t.Helper()
	var taints []resourceapi.DeviceTaint
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, d := range sliceDeviceTaints(t, node) {
			if d.Name == device {
				taints = d.Taints
			}
		}
		return ok(taints), nil
	})
	if err != nil {
		t.Fatalf("%s/%s: taints %v", node, device, taints)
	}
	return taints
}

func hasTaint(ts []resourceapi.DeviceTaint, key, value string, effect resourceapi.DeviceTaintEffect) bool {
	for _, x := range ts {
		if x.Key == key && x.Value == value && x.Effect == effect && x.TimeAdded != nil {
			return true
		}
	}
	return false
}

// watchUnhealthy watches a pod from now on and returns a function that waits
// until some status of it listed an allocated resource as Unhealthy (the pod
// may be gone by then: the eviction follows quickly).
func watchUnhealthy(t *testing.T, ns, name string) func(time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	found := make(chan string, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				for _, rs := range cs.AllocatedResourcesStatus {
					for _, r := range rs.Resources {
						if r.Health == v1.ResourceHealthStatusUnhealthy {
							once.Do(func() { found <- fmt.Sprintf("%s %s: %s %s", cs.Name, rs.Name, r.ResourceID, r.Health) })
						}
					}
				}
			}
		}
	}()
	return func(timeout time.Duration) string {
		select {
		case m := <-found:
			return m
		case <-time.After(timeout):
			t.Fatalf("pod %s/%s never showed an Unhealthy allocated resource", ns, name)
			return ""
		}
	}
}

func gpudraStatus(t *testing.T, node string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "_output", "bin", "gpudra"), "status", "--kubeconfig", kubeconfig, "--node", node).CombinedOutput()
	if err != nil {
		t.Fatalf("gpudra status: %v\n%s", err, out)
	}
	return string(out)
}

// pluginMetricsURL reads the plugin's metrics port from the cluster's
// settings: PLUGIN_METRICS_PORT + the node's slot.
func pluginMetricsURL(t *testing.T, node string) string {
	t.Helper()
	env, err := os.ReadFile(filepath.Join(clusterDir, "cluster.env"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PLUGIN_METRICS_PORT=(\d+)$`).FindSubmatch(env)
	if m == nil {
		t.Fatal("cluster.env has no PLUGIN_METRICS_PORT")
	}
	slot, err := os.ReadFile(filepath.Join(nodeDir(node), "slot"))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := strconv.Atoi(string(m[1]))
	s, _ := strconv.Atoi(strings.TrimSpace(string(slot)))
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", base+s)
}

func scrape(t *testing.T, node string) string {
	t.Helper()
	resp, err := http.Get(pluginMetricsURL(t, node))
	if err != nil {
		t.Fatalf("scrape the plugin of %s: %v", node, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// metricIn returns the value of one sample line, -1 when absent.
func metricIn(body, sample string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func metricValue(t *testing.T, node, sample string) float64 {
	t.Helper()
	return max(metricIn(scrape(t, node), sample), 0)
}
