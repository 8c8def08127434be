//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/health"
)

// TestTimeSlicedPodOnLostGPUIsDeleted (issue 13): a time-sliced pod runs on
// a GPU that then falls off the bus — every NVML query of it, and
// nvidia-smi, fail — and the pod is deleted. Unpreparing its claim cannot
// set the GPU's default time slice back; before issue 13 that failed the
// unprepare, the kubelet retried it for as long as the GPU stayed lost, and
// the pod stayed Terminating. Now the restore is best effort (its marker
// stays, the retry comes with the GPU's next claim or the plugin's next
// start): the pod is gone within its termination grace period plus a
// margin, and the claim's checkpoint record is released.
func TestTimeSlicedPodOnLostGPUIsDeleted(t *testing.T) {
	const node = "gpu-h100"
	const grace = 5 * time.Second
	const margin = 25 * time.Second // the kubelet's pod sync and the API round trips, on a loaded machine
	ns := namespace(t)
	applyYAML(t, ns, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: ts}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu.gpudra.io}}
    config:
    - requests: [gpu]
      opaque:
        driver: gpu.gpudra.io
        parameters: {apiVersion: resource.gpudra.io/v1alpha1, kind: GpuClaimParameters, sharing: {strategy: TimeSlicing, timeSlicing: {interval: Medium}}}
---
apiVersion: v1
kind: Pod
metadata: {name: ts}
spec:
  nodeSelector: {kubernetes.io/hostname: gpu-h100}
  terminationGracePeriodSeconds: 5
  containers:
  - {name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: gpu}]}}
  resourceClaims:
  - {name: gpu, resourceClaimName: ts}
`)
	waitRunning(t, ns, "ts")
	p := pod(t, ns, "ts")
	dev := allocatedDevices(t, p)[0]
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), "ts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(checkpointDir(node), string(claim.UID)+".json")
	if _, err := os.Stat(record); err != nil {
		t.Fatalf("the prepared claim has no checkpoint record: %v", err)
	}
	waitTimeSlice(t, node, dev.uuid, "2") // Medium
	t.Cleanup(func() {
		clusterCmd(t, "clear-faults", node)
		clusterCmd(t, "restart-plugin", node)
		// The restore left pending is done at the plugin's start.
		waitTimeSlice(t, node, dev.uuid, "0")
	})

	// By UUID, so that the fake nvidia-smi fails for it too.
	clusterCmd(t, "inject-fault", node, dev.uuid, "lost")
	start := time.Now()
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), "ts", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, grace+margin, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, "ts", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod on the lost GPU %s (%s) not gone %v after its deletion (grace period %v)", dev.name, dev.uuid, grace+margin, grace)
	}
	t.Logf("pod on the lost GPU gone %v after its deletion (grace period %v)", time.Since(start).Round(time.Millisecond), grace)
	if _, err := os.Stat(record); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the claim's checkpoint record %s is still there (%v)", record, err)
	}
	if got := timeSlice(node, dev.uuid); got != "2" {
		t.Errorf("time slice of the lost GPU is %q; the fake nvidia-smi must not have answered", got)
	}
}

// TestFatalTaintAfterPluginRestart (issue 13): a fatal XID (48, a
// double-bit ECC error, after which the R570 driver of gpu-h100 asks for a
// GPU reset) taints a GPU NoExecute; the plugin pod is then deleted, as a
// drain or an upgrade does. The restarted plugin publishes the XID taint
// again with the time it was first added: the health conditions are kept in
// a state file per boot (internal/plugin/health, persist.go). Before, they lived in the
// plugin's memory only; the XID event is not delivered again, so the
// restarted plugin published the GPU with the recovery-action taint its
// probe reads back, and without the XID taint. Clearing the fault (the GPU
// reset) removes the taints.
func TestFatalTaintAfterPluginRestart(t *testing.T) {
	keepFailure(t)
	const node, gpu = "gpu-h100", "gpu-6"
	for _, d := range sliceDeviceTaints(t, node) {
		if d.Name == gpu && len(d.Taints) > 0 {
			t.Fatalf("%s/%s is tainted before the test: %v", node, gpu, d.Taints)
		}
	}
	t.Cleanup(func() { leaveHealthy(t, node) })

	clusterCmd(t, "inject-fault", node, gpu, "xid", "48")
	before := waitTaints(t, node, gpu, func(ts []resourceapi.DeviceTaint) bool {
		return hasTaint(ts, health.KeyXID, "48", resourceapi.DeviceTaintEffectNoExecute) &&
			taintOf(ts, health.KeyRecovery) != nil
	})
	xid := taintOf(before, health.KeyXID)
	t.Logf("before the restart: %s", taintsString(before))

	clusterCmd(t, "restart-plugin", node) // returns once the new pod is Ready
	// The new plugin has published once its health monitor probed every GPU
	// (the taints come from its conditions); then the taint must stay, with
	// its first time, in every look at the slice for a while.
	waitProbeRound(t, node)
	deadline := time.Now().Add(10 * time.Second)
	var after []resourceapi.DeviceTaint
	for time.Now().Before(deadline) {
		after = deviceTaints(t, node, gpu)
		got := taintOf(after, health.KeyXID)
		if got == nil || got.Value != "48" || got.Effect != resourceapi.DeviceTaintEffectNoExecute {
			t.Fatalf("after the plugin restart %s has no NoExecute XID 48 taint: %s (before: %s)", gpu, taintsString(after), taintsString(before))
		}
		if got.TimeAdded == nil || !got.TimeAdded.Equal(xid.TimeAdded) {
			t.Fatalf("after the plugin restart the XID taint of %s was added at %v, first at %v", gpu, got.TimeAdded, xid.TimeAdded)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("after the restart: %s", taintsString(after))

	// The reset the driver asked for: every taint of the GPU goes.
	clusterCmd(t, "clear-faults", node)
	waitTaints(t, node, gpu, func(ts []resourceapi.DeviceTaint) bool { return len(ts) == 0 })
}

// leaveHealthy clears the node's faults and waits for its taints to go,
// restarting the plugin once if they do not.
func leaveHealthy(t *testing.T, node string) {
	t.Helper()
	clusterCmd(t, "clear-faults", node)
	untainted := func(timeout time.Duration) bool {
		return wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			for _, d := range sliceDeviceTaints(t, node) {
				if len(d.Taints) > 0 {
					return false, nil
				}
			}
			return true, nil
		}) == nil
	}
	if untainted(30 * time.Second) {
		return
	}
	clusterCmd(t, "restart-plugin", node)
	if !untainted(time.Minute) {
		t.Errorf("%s still has tainted devices after clearing its faults and a plugin restart", node)
	}
}

// waitProbeRound waits until the node's (current) plugin has probed each
// of its GPUs at least once.
func waitProbeRound(t *testing.T, node string) {
	t.Helper()
	const probes = `gpudra_plugin_nvml_call_duration_seconds_count{call="GetMemoryInfo"}`
	gpus := 0
	for _, d := range sliceDeviceTaints(t, node) {
		if !strings.Contains(d.Name, "-mig-") {
			gpus++
		}
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return metricValue(t, node, probes) >= float64(gpus), nil
	}); err != nil {
		t.Fatalf("the plugin of %s never probed its %d GPUs", node, gpus)
	}
}

func deviceTaints(t *testing.T, node, device string) []resourceapi.DeviceTaint {
	t.Helper()
	for _, d := range sliceDeviceTaints(t, node) {
		if d.Name == device {
			return d.Taints
		}
	}
	t.Fatalf("%s/%s is not published", node, device)
	return nil
}

func taintOf(ts []resourceapi.DeviceTaint, key string) *resourceapi.DeviceTaint {
	for i := range ts {
		if ts[i].Key == key {
			return &ts[i]
		}
	}
	return nil
}

func taintsString(ts []resourceapi.DeviceTaint) string {
	var out []string
	for _, x := range ts {
		at := "?"
		if x.TimeAdded != nil {
			at = x.TimeAdded.UTC().Format(time.RFC3339)
		}
		out = append(out, fmt.Sprintf("%s=%s:%s@%s", x.Key, x.Value, x.Effect, at))
	}
	return "[" + strings.Join(out, " ") + "]"
}
