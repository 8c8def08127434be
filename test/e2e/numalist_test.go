//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A claim for two GPUs of one NUMA node on the node NODE.
const numaPairClaim = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: NAME}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.gpudra.io, count: 2}
    constraints:
    - {requests: [gpus], matchAttribute: resource.kubernetes.io/numaNode}
---
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  nodeSelector: {kubernetes.io/hostname: NODE}
  containers:
  - {name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: gpus}]}}
  resourceClaims:
  - {name: gpus, resourceClaimName: NAME}
`

// TestNUMANodeList adds a node of four L4s, one on each NUMA node of a
// two-socket host with sub-NUMA clustering, that publishes numaNode as a
// list (--numa-node-attribute=list; the local cluster enables
// DRAListTypeAttributes): each GPU lists its node and its socket's other
// node, read from the driver root's sysfs. Two GPUs "on one NUMA node" are
// then found on one socket; with the scalar form no two GPUs of the node
// share a node (TestNUMAListAllocation runs the scheduler's allocator on
// both forms).
func TestNUMANodeList(t *testing.T) {
	const node = "gpu-snc"
	profile := filepath.Join(repoRoot, "test", "localcluster", "profiles", "l4-snc2.yaml")
	t.Cleanup(func() { clusterCmd(t, "remove-node", node) })
	clusterCmd(t, "add-node", node+"="+profile, "--numa-node-attribute=list")
	waitSliceDevices(t, node, 4)
	want := map[string][]int64{"gpu-0": {0, 1}, "gpu-1": {1, 0}, "gpu-2": {2, 3}, "gpu-3": {3, 2}}
	for _, d := range sliceDeviceTaints(t, node) {
		if got := d.Attributes["resource.kubernetes.io/numaNode"].IntValues; !slices.Equal(got, want[d.Name]) {
			t.Errorf("%s: numaNode %v, want %v", d.Name, got, want[d.Name])
		}
	}

	ns := namespace(t)
	applyYAML(t, ns, strings.NewReplacer("NAME", "pair", "NODE", node).Replace(numaPairClaim))
	waitRunning(t, ns, "pair")
	got := allocatedDevices(t, pod(t, ns, "pair"))
	names := []string{got[0].name, got[1].name}
	slices.Sort(names)
	if len(got) != 2 || (names[0] != "gpu-0" || names[1] != "gpu-1") && (names[0] != "gpu-2" || names[1] != "gpu-3") {
		t.Fatalf("want two GPUs of one socket, got %v", names)
	}

	// Each socket holds one pair: a second fits, a third does not.
	applyYAML(t, ns, strings.NewReplacer("NAME", "pair2", "NODE", node).Replace(numaPairClaim))
	waitRunning(t, ns, "pair2")
	applyYAML(t, ns, strings.NewReplacer("NAME", "pair3", "NODE", node).Replace(numaPairClaim))
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling,involvedObject.name=pair3"})
		return err == nil && len(evs.Items) > 0, nil
	}); err != nil {
		t.Fatal("a third pair of one socket should not fit a node of two sockets (no FailedScheduling event)")
	}
	if p := pod(t, ns, "pair3"); p.Spec.NodeName != "" {
		t.Fatalf("a third pair was scheduled on %s", p.Spec.NodeName)
	}
}
