//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestMPSAcrossHelmUpgrade: `helm upgrade` rolls the plugin DaemonSet with
// the chart's maxSurge (the new pod starts next to the old one, each in its
// own PID namespace); MPS pods keep running, the claim's daemon answers its
// pipe afterwards — the old pod's daemon dies with its container, the new
// plugin starts one again and tells the clients with an event — and a new
// pod joining the claim is prepared by the new plugin.
func TestMPSAcrossHelmUpgrade(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("11-mps.yaml"))
	waitRunning(t, ns, "mps-a", "mps-b")
	p := pod(t, ns, "mps-a")
	node := p.Spec.NodeName
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), "mps-gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(pluginDir(node), "mps", string(claim.UID), "pipe")
	if d := mpsDaemons(t, pipe); len(d) != 1 {
		t.Fatalf("MPS daemons serving %s: %v, want one", pipe, d)
	}
	oldPod, err := realCluster.PluginPod(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	// A value that changes the pod template and nothing else: a pod
	// annotation that is new on every run.
	rollout := fmt.Sprintf("kubeletPlugin.podAnnotations.e2e\\.gpudra\\.io/rollout=r%d", time.Now().UnixNano())
	start := time.Now()
	if err := realCluster.InstallDriver(context.Background(), rollout); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	newPod, err := realCluster.PluginPod(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	if newPod.UID == oldPod.UID {
		t.Fatalf("the plugin pod on %s was not replaced by the upgrade", node)
	}
	t.Logf("rolled out in %s: %s replaced %s", time.Since(start).Round(time.Millisecond), newPod.Name, oldPod.Name)
	var daemons []int
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		daemons = mpsDaemons(t, pipe)
		return len(daemons) == 1, nil
	}); err != nil {
		t.Fatalf("after the upgrade: MPS daemons %v serving %s, want exactly one", daemons, pipe)
	}
	for _, name := range []string{"mps-a", "mps-b"} {
		if got := pod(t, ns, name); got.Status.Phase != "Running" {
			t.Errorf("%s is %s after the upgrade", name, got.Status.Phase)
		}
	}
	// A third client of the claim, prepared by the new plugin.
	applyYAML(t, ns, `
apiVersion: v1
kind: Pod
metadata: {name: mps-c}
spec:
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimName: mps-gpu}
`)
	waitRunning(t, ns, "mps-c")
	if got := getenv(t, injection(t, pod(t, ns, "mps-c"), "cuda"), "CUDA_MPS_PIPE_DIRECTORY"); got != "/tmp/nvidia-mps" {
		t.Errorf("mps-c: CUDA_MPS_PIPE_DIRECTORY=%q", got)
	}
}
