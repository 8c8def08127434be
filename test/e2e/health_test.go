//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
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
	applySpec(t, ns, spec("15-fault-tolerant-inference.yaml"))
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
  - {name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: gpu}]}}
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
	keepFailure(t)
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
  - {name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: gpu}]}}
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
		`gpudra_plugin_phase_duration_seconds_count{operation="prepare",phase="record_completed"}`,
		`gpudra_plugin_call_duration_seconds_count{method="NodePrepareResources"}`,
		`gpudra_plugin_claim_read_duration_seconds_count`,
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
