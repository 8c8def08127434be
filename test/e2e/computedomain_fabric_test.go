//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/localcluster"
)

// The tray whose NVLink fabric registration is in progress when it boots,
// and the clique its profile completes it in.
const (
	cdPending    = "cd-d"
	rackClique3  = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44.3"
	rackClique5  = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44.5" // after a fabric-clique 5 line
	pendingTray  = "gb200-tray-fabric-pending.yaml"
	waitingInLog = "Waiting for the NVLink fabric registration"
)

// testComputeDomainFabric adds a tray that boots while the fabric manager
// is still registering its GPUs (state in-progress, no clique yet): its
// channel plugin publishes no device and is not Ready, saying why in its
// log, and a domain's pod pinned there stays Pending. Then the simulator
// completes the registration (fault-file fabric lines): the plugin
// publishes its channels with the clique, the pod runs and the domain's
// status has the tray in that clique. Then the fabric changes under the
// running plugins (fabricChangesWhileRunning).
func testComputeDomainFabric(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := realCluster.InstallDriver(ctx, "computeDomains.enabled=true", "kubeletPlugin.fabricPollInterval="+fabricPoll); err != nil {
		t.Fatalf("install with computeDomains.enabled=true: %v", err)
	}
	names := compat.Default().ComputeDomain()
	faults := filepath.Join(driverRoot(cdPending), fakedriver.FaultFile)
	release := realCluster.Config().Namespace // read before add-node changes the configuration

	// add-node returns once the node's plugin pod is Ready, which it is
	// not before the registration completes: it runs meanwhile.
	added := make(chan error, 1)
	addCtx, stopAdding := context.WithCancel(ctx)
	go func() {
		added <- realCluster.AddNode(addCtx, localcluster.NodeSpec{Name: cdPending,
			Profile: filepath.Join(repoRoot, "test", "localcluster", "profiles", pendingTray)})
	}()
	var addErr error
	addDone := false
	addNode := func() error { // add-node's result, once it returned
		if !addDone {
			addErr, addDone = <-added, true
		}
		return addErr
	}
	t.Cleanup(func() {
		stopAdding()
		_ = addNode()
		clusterCmd(t, "remove-node", cdPending)
	})

	// The GPU plugin publishes the tray's GPUs; the channel plugin waits.
	var plugin *v1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if slicesOf(t, driver, cdPending) == 0 {
			return false, nil
		}
		pods, err := client.CoreV1().Pods(release).List(ctx, metav1.ListOptions{
			LabelSelector: localcluster.PluginLabelSelector, FieldSelector: "spec.nodeName=" + cdPending})
		if err != nil || len(pods.Items) != 1 {
			return false, nil
		}
		plugin = &pods.Items[0]
		logs, _ := kubectl("-n", plugin.Namespace, "logs", plugin.Name, "-c", "compute-domain")
		return strings.Contains(logs, waitingInLog), nil
	})
	if err != nil {
		t.Fatalf("the channel plugin on %s never logged %q: %v", cdPending, waitingInLog, err)
	}
	t.Logf("%s: GPU pool published, channel plugin waiting for the fabric %s after the node was added",
		cdPending, time.Since(began).Round(100*time.Millisecond))

	ns := namespace(t)
	applyYAML(t, ns, computeDomain("late", 1, "Single"))
	applyYAML(t, ns, channelPod("late-0", "late", cdPending))
	time.Sleep(3 * time.Second) // several retries of the plugin (5 s apart) and of the scheduler
	if n := slicesOf(t, names.Driver, cdPending); n != 0 {
		t.Errorf("%s publishes %d channel driver slices while its fabric registration is in progress, want none", cdPending, n)
	}
	if p := pod(t, ns, "late-0"); p.Status.Phase != v1.PodPending {
		t.Errorf("late-0 is %s while its node's fabric registration is in progress, want Pending", p.Status.Phase)
	}
	if ready, ok := containerReady(t, plugin.Namespace, plugin.Name, "compute-domain"); !ok || ready {
		t.Errorf("the channel plugin container on %s: ready %v (found %v), want not ready while it waits", cdPending, ready, ok)
	}

	// The fabric manager completes the registration.
	completed := time.Now()
	f, err := os.OpenFile(faults, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		_, err = fmt.Fprintf(f, "gpu-%d fabric completed\n", i)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("complete the fabric registration: %v", err)
	}
	waitRunning(t, ns, "late-0")
	t.Logf("late-0 Running %s after the registration completed", time.Since(completed).Round(100*time.Millisecond))
	if err := addNode(); err != nil {
		t.Fatalf("add-node %s: %v", cdPending, err)
	}
	late := waitDomainReady(t, ns, "late", 1)
	assertDomainNodes(t, late, []string{cdPending}, rackClique3)
	for _, d := range channelDevices(t, names.Driver, cdPending) {
		if c := d.Attributes["cliqueID"].StringValue; c == nil || *c != rackClique3 {
			t.Errorf("%s: device %s has cliqueID %v, want %s", cdPending, d.Name, c, rackClique3)
		}
	}
	fabricChangesWhileRunning(t, ns, plugin.Namespace, plugin.Name)

	mustKubectl(t, "-n", ns, "delete", "pods", "--all", "--wait=true", "--timeout=2m")
	mustKubectl(t, "-n", ns, "delete", "computedomains.resource.gpudra.io", "--all", "--wait=true", "--timeout=2m")
	assertDomainGone(t, ns, late, names, []string{cdPending})
	t.Logf("subtest took %s", time.Since(began).Round(100*time.Millisecond))
}

// slicesOf counts the ResourceSlices of driver on node.
func slicesOf(t *testing.T, driver, node string) int {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: "spec.driver=" + driver + ",spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// channelDevices are the devices driver publishes on node.
func channelDevices(t *testing.T, driver, node string) []resourceapi.Device {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: "spec.driver=" + driver + ",spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.Device
	for _, s := range list.Items {
		out = append(out, s.Spec.Devices...)
	}
	if len(out) == 0 {
		t.Errorf("%s publishes no device of %s", node, driver)
	}
	return out
}

// containerReady reads a container's readiness; ok is false when the pod
// has no status of it.
func containerReady(t *testing.T, ns, podName, container string) (ready, ok bool) {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), podName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			return s.Ready, true
		}
	}
	return false, false
}
