//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
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

// Helpers of the health tests: faults, slice taints, pod health, metrics.

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

// pluginMetricsURL is the /metrics of the node's plugin pod.
func pluginMetricsURL(t *testing.T, node string) string {
	t.Helper()
	url, err := realCluster.PluginMetricsURL(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	return url
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
