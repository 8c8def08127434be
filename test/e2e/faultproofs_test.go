//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
