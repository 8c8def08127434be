//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

const claimPod = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-h100}
spec:
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
metadata: {name: POD}
spec:
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-h100}
`

func podWithClaim(t *testing.T, ns, name string) (claimUID string) {
	t.Helper()
	applyYAML(t, ns, strings.ReplaceAll(claimPod, "POD", name))
	waitRunning(t, ns, name)
	assertSeesAllocation(t, ns, name, "cuda")
	p := pod(t, ns, name)
	c, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(c.UID)
}

func specPath(node, claimUID string) string {
	return filepath.Join(cdiDir(node), "k8s.gpu.gpudra.io-claim_"+claimUID+".json")
}

func TestDeletePodUnprepares(t *testing.T) {
	ns := namespace(t)
	uid := podWithClaim(t, ns, "short-lived")
	for _, f := range []string{specPath("gpu-h100", uid), filepath.Join(checkpointDir("gpu-h100"), uid+".json")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("while the pod runs, %s must exist: %v", f, err)
		}
	}
	deletePod(t, ns, "short-lived")
	fileGone(t, specPath("gpu-h100", uid))
	fileGone(t, filepath.Join(checkpointDir("gpu-h100"), uid+".json"))
}

func TestPluginRestartKeepsClaimsAndServesNewOnes(t *testing.T) {
	ns := namespace(t)
	uid := podWithClaim(t, ns, "before-restart")
	start := time.Now()
	clusterCmd(t, "restart-plugin", "gpu-h100") // kill -9, then start again
	t.Logf("plugin restarted in %v", time.Since(start))
	waitSliceDevices(t, "gpu-h100", 8)
	// The running pod's claim survived: checkpoint and spec are still there.
	if _, err := os.Stat(specPath("gpu-h100", uid)); err != nil {
		t.Fatalf("CDI spec of a running pod lost across a plugin restart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(checkpointDir("gpu-h100"), uid+".json")); err != nil {
		t.Fatalf("checkpoint of a running pod lost across a plugin restart: %v", err)
	}
	// New claims are served, and never get the GPU the first pod holds.
	start = time.Now()
	podWithClaim(t, ns, "after-restart")
	t.Logf("new pod Running %v after the restart", time.Since(start))
	a := allocatedDevices(t, pod(t, ns, "before-restart"))
	b := allocatedDevices(t, pod(t, ns, "after-restart"))
	if a[0].uuid == b[0].uuid {
		t.Fatalf("both pods got %s", a[0].uuid)
	}
	// And the old claim still unprepares cleanly through the new process.
	start = time.Now()
	deletePod(t, ns, "before-restart")
	fileGone(t, specPath("gpu-h100", uid))
	t.Logf("old pod unprepared in %v", time.Since(start))
}

func TestPluginComesBackAndRepublishesSlice(t *testing.T) {
	keepFailure(t)
	clusterCmd(t, "stop-plugin", "gpu-mixed")
	// Lose the slice while the plugin is down (as if an admin deleted it).
	if out, err := kubectl("delete", "resourceslices", "--field-selector", "spec.nodeName=gpu-mixed"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	waitSliceDevices(t, "gpu-mixed", 0)
	clusterCmd(t, "start-plugin", "gpu-mixed")
	waitSliceDevices(t, "gpu-mixed", 4)
}

func TestInvalidParametersBlockContainerCreation(t *testing.T) {
	ns := namespace(t)
	manifest := `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: bad-params}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.gpudra.io}
    config:
    - requests: [gpu]
      opaque:
        driver: gpu.gpudra.io
        parameters:
          apiVersion: resource.gpudra.io/v1alpha1
          kind: GpuClaimParameters
          sharing: {strategy: Sometimes}
---
apiVersion: v1
kind: Pod
metadata: {name: bad-params}
spec:
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimName: bad-params}
`
	// The chart's webhook refuses the claim at admission.
	out, err := kubectlApply(t, ns, manifest)
	if err == nil || !strings.Contains(out, "denied the request") || !strings.Contains(out, "Sometimes") || !strings.Contains(out, "TimeSlicing") {
		t.Fatalf("the chart's webhook should refuse the claim, naming the bad value and what is allowed: %v\n%s", err, out)
	}
	// With the controller down, failurePolicy Ignore admits it unchecked:
	// the plugin's own check refuses it at prepare (an event, the container
	// not created).
	lockControllerTests(t)
	t.Cleanup(func() { clusterCmd(t, "start-controller") })
	clusterCmd(t, "stop-controller")
	applyYAML(t, ns, manifest)
	var msg string
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad-params"})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "sharing.strategy") {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		out, _ := kubectl("-n", ns, "describe", "pod", "bad-params")
		t.Fatalf("no event naming the bad field:\n%s", out)
	}
	if !strings.Contains(msg, "Sometimes") || !strings.Contains(msg, "TimeSlicing") {
		t.Errorf("event should name the bad value and what is allowed: %q", msg)
	}
	// The kubelet records the event during the pod's sync and writes the
	// pod's status through its status manager afterwards, asynchronously:
	// the event can be seen before any container status is (a cold CI run
	// read the status once, right after the event, and found none).
	// Wait for the kubelet's status, then check the container was not
	// created.
	var p *v1.Pod
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		p = pod(t, ns, "bad-params")
		return len(p.Status.ContainerStatuses) > 0, nil
	})
	if err != nil || p.Status.Phase != "Pending" || len(p.Status.ContainerStatuses) == 0 ||
		p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("pod should stay in ContainerCreating (%v), status: %+v", err, p.Status)
	}
}

// waitSliceDevices waits until the node's ResourceSlices list n whole GPUs
// (type "gpu"; MIG devices are not counted).
func waitSliceDevices(t *testing.T, node string, n int) {
	t.Helper()
	got := -1
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, nil
		}
		got = 0
		for _, s := range slices.Items {
			for _, d := range s.Spec.Devices {
				if typ := d.Attributes["type"].StringValue; typ != nil && *typ == "gpu" {
					got++
				}
			}
		}
		return got == n, nil
	})
	if err != nil {
		t.Fatalf("node %s: want %d GPUs in its ResourceSlices, got %d", node, n, got)
	}
}
