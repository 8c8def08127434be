//go:build e2e && faults

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/failpoint"
	"github.com/gpudra/gpudra/test/e2elogs"
)

// kubeletDeadline is how long the kubelet waits for NodePrepareResources
// (defaultClientCallTimeout of its DRA client, 45 s), with a margin.
const kubeletDeadline = 50 * time.Second

// testRollbackPastDeadline is issue 13's "kill -9 during a rollback after
// the kubelet's deadline": a claim of two GPUs time-sliced with the Long
// interval. After the first GPU's time slice is set, the failpoint
// prepare/TimeSliceSet sleeps past the kubelet's deadline, so setting the
// second GPU's fails on the expired request and the prepare rolls back. The
// rollback must still undo the time slice (its own context, not the
// kubelet's): while rollback/SharingReleased holds the plugin for a few
// seconds the test sees the CDI spec gone, every time slice default and no
// marker, with the record and holders still there; then the failpoint kills
// the plugin. The pod is deleted meanwhile, so nothing prepares the claim
// again: once the kubelet has restarted the plugin, its start-up recovery
// has rolled the claim back, and no CDI spec, record, holder, marker or
// non-default time slice is left.
func testRollbackPastDeadline(t *testing.T, ns string) {
	p := freshPluginPod(t)
	pid := onePluginPID(t)
	arm(t, fmt.Sprintf("%s=sleep(%d),%s=sleep-crash(10000)", failpoint.PrepareTimeSliceSet, kubeletDeadline.Milliseconds(),
		failpoint.RollbackSharingReleased))
	applyYAML(t, ns, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: two-long}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.gpudra.io, allocationMode: ExactCount, count: 2}
    config:
    - requests: [gpu]
      opaque:
        driver: gpu.gpudra.io
        parameters: {apiVersion: resource.gpudra.io/v1alpha1, kind: GpuClaimParameters,
          sharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}}
---
apiVersion: v1
kind: Pod
metadata: {name: rollback}
spec:
  nodeSelector: {kubernetes.io/hostname: `+faultNode+`}
  containers:
  - name: c
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimName: two-long}
`)
	var gpus []device
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		gpus = allocatedDevices(t, pod(t, ns, "rollback"))
		return len(gpus) == 2, nil
	}); err != nil {
		t.Fatalf("claim two-long not allocated two GPUs: %v", gpus)
	}
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), "two-long", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(claim.UID)
	t.Cleanup(func() {
		_ = client.CoreV1().Pods(ns).Delete(context.Background(), "rollback", metav1.DeleteOptions{})
		_ = client.ResourceV1().ResourceClaims(ns).Delete(context.Background(), "two-long", metav1.DeleteOptions{})
	})
	record := filepath.Join(checkpointDir(faultNode), uid+".json")
	marker := func(d device) string { return filepath.Join(pluginDir(faultNode), "locks", "timeslice."+d.name) }
	holder := func(d device) string { return filepath.Join(checkpointDir(faultNode), "holders", d.name, uid) }
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	levels := func() string {
		var s []string
		for _, d := range gpus {
			s = append(s, d.name+"="+timeSlice(faultNode, d.uuid))
		}
		return strings.Join(s, " ")
	}
	defaultSlice := func(d device) bool { l := timeSlice(faultNode, d.uuid); return l == "" || l == "0" }

	// The first GPU is time-sliced, then the prepare sleeps past the deadline.
	start := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return !defaultSlice(gpus[0]) || !defaultSlice(gpus[1]), nil
	}); err != nil {
		t.Fatalf("no GPU of the claim was time-sliced: %s", levels())
	}
	t.Logf("time slices set (%s); the prepare sleeps past the kubelet's deadline", levels())

	// The rollback, past the deadline, has undone the sharing setup and sits
	// in rollback/SharingReleased: the test looks, then deletes the pod.
	seen := false
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, kubeletDeadline+time.Minute, true, func(context.Context) (bool, error) {
		if pids, _ := realCluster.PluginPIDs(faultNode); len(pids) != 1 || pids[0] != pid {
			return false, fmt.Errorf("the plugin died before its rollback had restored the time slices (%s) and cleared the markers", levels())
		}
		if exists(specPath(faultNode, uid)) || !exists(record) {
			return false, nil
		}
		for _, d := range gpus {
			if !defaultSlice(d) || exists(marker(d)) {
				return false, nil
			}
		}
		seen = true
		return true, nil
	})
	if !seen {
		t.Fatalf("the rollback after the kubelet's deadline did not undo the time slices: %v; slices %s, CDI spec present %v, record present %v",
			err, levels(), exists(specPath(faultNode, uid)), exists(record))
	}
	t.Logf("after %v: rolled back past the deadline up to the holders and the record (slices %s); the plugin is about to be killed",
		time.Since(start).Round(time.Second), levels())
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), "rollback", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		pids, err := realCluster.PluginPIDs(faultNode)
		return err == nil && !slices.Contains(pids, pid), nil
	}); err != nil {
		t.Fatal("the plugin was not killed in the rollback")
	}
	restarts := pluginRestarted(t, p)
	fileGone(t, armFile())
	waitPodGone(t, ns, "rollback", 3*time.Minute)
	for _, f := range []string{specPath(faultNode, uid), record, holder(gpus[0]), holder(gpus[1]), marker(gpus[0]), marker(gpus[1])} {
		fileGone(t, f)
	}
	for _, d := range gpus {
		if !defaultSlice(d) {
			t.Errorf("%s (%s) kept time slice level %s", d.name, d.uuid, timeSlice(faultNode, d.uuid))
		}
	}
	cur, err := realCluster.PluginPod(context.Background(), faultNode)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := client.CoreV1().Pods(cur.Namespace).GetLogs(cur.Name, &v1.PodLogOptions{Container: "plugin"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recovered := false
	for _, line := range strings.Split(string(raw), "\n") {
		recovered = recovered || strings.Contains(line, "Rolling back interrupted claim") && strings.Contains(line, uid)
	}
	if !recovered {
		t.Errorf("the restarted plugin's log does not show the start-up rollback of claim %s; its log:\n%s", uid, e2elogs.Tail(string(raw), 20))
	}
	if err := client.ResourceV1().ResourceClaims(ns).Delete(context.Background(), "two-long", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err) // it would keep two of the node's GPUs allocated
	}
	t.Logf("plugin killed in the rollback and restarted by the kubelet (%d restarts); nothing of claim %s left", restarts, uid)
}
