//go:build e2e

package e2e

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Blue/green on a node without a spare GPU: every L4 of the cluster is in
// the blue Deployment's shared (time-sliced) claim; green references the same
// claim, starts on those GPUs, and blue goes. Sampled every 100 ms throughout:
// at least two replicas run, and each replica that ran saw both GPUs.
func TestBlueGreenWithoutSpareGPU(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("18-blue-green.yaml"))
	blue := waitDeployment(t, ns, "app=inference,version=blue", 2)
	devs := claimDevices(t, sliceDevices(t), ns, "inference-gpus")
	if len(devs) != 2 || devs[0].product != "NVIDIA L4" || devs[1].product != "NVIDIA L4" {
		t.Fatalf("inference-gpus should hold both L4s, got %+v", devs)
	}

	want := []string{devs[0].uuid, devs[1].uuid}
	sort.Strings(want)
	seesBoth := func(podName string) {
		t.Helper()
		var uuids []string
		for _, g := range containerGPUs(t, ns, podName, "server") {
			uuids = append(uuids, g.UUID)
		}
		sort.Strings(uuids)
		if len(uuids) != 2 || uuids[0] != want[0] || uuids[1] != want[1] {
			t.Errorf("%s sees %v, the shared claim holds %v", podName, uuids, want)
		}
	}
	for _, p := range blue {
		seesBoth(p.Name)
	}

	// The monitor: the fewest ready replicas seen, and every pod that ran.
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	fewest, samples := 1<<30, 0
	ran := map[string]bool{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=inference"})
			if err == nil {
				ready := 0
				mu.Lock()
				for _, p := range pods.Items {
					if p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil && podReady(&p) {
						ready++
						ran[p.Name] = true
					}
				}
				fewest, samples = min(fewest, ready), samples+1
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	start := time.Now()
	if out, err := kubectl("-n", ns, "scale", "deployment/inference-green", "--replicas=2"); err != nil {
		t.Fatalf("scale green: %v\n%s", err, out)
	}
	green := waitDeployment(t, ns, "app=inference,version=green", 2)
	if out, err := kubectl("-n", ns, "scale", "deployment/inference-blue", "--replicas=0"); err != nil {
		t.Fatalf("scale blue down: %v\n%s", err, out)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=inference,version=blue"})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("blue pods did not go: %v", err)
	}
	time.Sleep(time.Second) // green keeps running after blue is gone
	stop()
	wg.Wait()
	t.Logf("rollout took %v; %d samples, at least %d ready replicas in each", time.Since(start).Round(100*time.Millisecond), samples, fewest)
	if fewest < 2 {
		t.Errorf("a sample saw only %d ready replicas: the service lost capacity during the rollout", fewest)
	}
	if n := len(listPods(t, ns, "app=inference,version=green", v1.PodRunning)); n != 2 {
		t.Errorf("%d green replicas run after blue went, want 2", n)
	}

	for _, p := range green {
		if !ran[p.Name] {
			t.Errorf("green pod %s never counted as ready", p.Name)
		}
		seesBoth(p.Name)
	}
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
