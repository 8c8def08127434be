//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

func spec(name string) string { return filepath.Join(repoRoot, "demo", "specs", name) }

func TestOnePodOneGPU(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("01-one-pod-one-gpu.yaml"))
	waitRunning(t, ns, "one-gpu")
	devs := assertSeesAllocation(t, ns, "one-gpu", "cuda")
	if len(devs) != 1 {
		t.Fatalf("want 1 GPU, got %v", devs)
	}
}

func TestTwoContainersShareOneClaim(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("02-shared-claim-two-containers.yaml"))
	waitRunning(t, ns, "two-containers")
	a := assertSeesAllocation(t, ns, "two-containers", "trainer")
	b := assertSeesAllocation(t, ns, "two-containers", "sidecar")
	if len(a) != 1 || a[0].uuid != b[0].uuid {
		t.Fatalf("containers of one claim must see the same GPU: %v vs %v", a, b)
	}
}

func TestSelectModelByCEL(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("03-select-model-by-cel.yaml"))
	waitRunning(t, ns, "wants-h100", "wants-l4")
	h := assertSeesAllocation(t, ns, "wants-h100", "cuda")
	l := assertSeesAllocation(t, ns, "wants-l4", "cuda")
	if h[0].product != "NVIDIA H100 80GB HBM3" || h[0].node != "gpu-h100" {
		t.Errorf("wants-h100 got %+v", h[0])
	}
	if l[0].product != "NVIDIA L4" || l[0].node != "gpu-mixed" {
		t.Errorf("wants-l4 got %+v", l[0])
	}
}

func TestAtLeast40Gi(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("04-at-least-40gi.yaml"))
	waitRunning(t, ns, "big-memory")
	d := assertSeesAllocation(t, ns, "big-memory", "cuda")
	if d[0].product != "NVIDIA A100-SXM4-40GB" {
		t.Errorf("on gpu-mixed only the A100s have >= 40Gi, got %+v", d[0])
	}
}

func TestTwoGPUsOnOnePCIeRoot(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("05-same-pcie-root.yaml"))
	waitRunning(t, ns, "pcie-pair")
	d := assertSeesAllocation(t, ns, "pcie-pair", "cuda")
	if len(d) != 2 || d[0].pcieRoot == "" || d[0].pcieRoot != d[1].pcieRoot {
		t.Errorf("want 2 GPUs on one PCIe root, got %+v", d)
	}
}

func TestDeploymentFillsNodeThenPending(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("06-deployment-fills-a-node.yaml"))
	pods := waitDeployment(t, ns, "app=fill-h100", 8)
	seen := map[string]string{}
	for _, p := range pods {
		for _, d := range assertSeesAllocation(t, ns, p.Name, "inference") {
			if other, dup := seen[d.uuid]; dup {
				t.Fatalf("GPU %s given to %s and %s", d.uuid, other, p.Name)
			}
			seen[d.uuid] = p.Name
		}
	}
	if len(seen) != 8 {
		t.Fatalf("8 pods should hold the 8 H100s, got %d distinct GPUs", len(seen))
	}
	if out, err := kubectl("-n", ns, "scale", "deployment/fill-h100", "--replicas=9"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The 9th replica stays Pending and the scheduler says why.
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		msg = evs.Items[len(evs.Items)-1].Message
		return true, nil
	})
	if err != nil {
		t.Fatal("no FailedScheduling event for the 9th replica")
	}
	if !strings.Contains(msg, "claim") {
		t.Errorf("FailedScheduling should explain the claim cannot be allocated: %q", msg)
	}
	time.Sleep(3 * time.Second)
	running := listPods(t, ns, "app=fill-h100", v1.PodRunning)
	if len(running) != 8 {
		t.Errorf("still exactly 8 Running expected, got %d", len(running))
	}
}

func TestLegacyExtendedResourcePod(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("07-extended-resource.yaml"))
	waitRunning(t, ns, "legacy-device-plugin-pod")
	d := assertSeesAllocation(t, ns, "legacy-device-plugin-pod", "cuda")
	if len(d) != 1 {
		t.Fatalf("nvidia.com/gpu: 1 should give one GPU, got %v", d)
	}
}

func TestFirstAvailable(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("08-first-available.yaml"))
	waitRunning(t, ns, "best-gpu")
	d := assertSeesAllocation(t, ns, "best-gpu", "cuda")
	if d[0].product != "NVIDIA H100 80GB HBM3" {
		t.Errorf("no H200 in the cluster: the H100 alternative should win, got %+v", d[0])
	}
	p := pod(t, ns, "best-gpu")
	c, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Status.Allocation.Devices.Results[0].Request; got != "gpu/h100" {
		t.Errorf("allocated subrequest %q, want gpu/h100", got)
	}
}

func listPods(t *testing.T, ns, selector string, phase v1.PodPhase) []v1.Pod {
	t.Helper()
	list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var out []v1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == phase && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func waitDeployment(t *testing.T, ns, selector string, n int) []v1.Pod {
	t.Helper()
	var pods []v1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		pods = listPods(t, ns, selector, v1.PodRunning)
		return len(pods) == n, nil
	})
	if err != nil {
		out, _ := kubectl("-n", ns, "get", "pods", "-o", "wide")
		// Why a pod is not Running: the scheduler's and kubelet's events, the claims' state.
		events, _ := kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp")
		claims, _ := kubectl("-n", ns, "get", "resourceclaims", "-o", "wide")
		t.Fatalf("want %d Running pods for %s, got %d\n%s\n%s\n%s", n, selector, len(pods), out, events, claims)
	}
	return pods
}
