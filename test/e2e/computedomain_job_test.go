//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

// The simulated NVL72 rack of the ComputeDomain tests: two compute trays in
// clique 1 and one in clique 2 of one NVLink domain.
var (
	cdClique1 = []string{"cd-a", "cd-b"}
	cdClique2 = "cd-c"
)

// TestComputeDomains adds the simulated rack once for its parts: job, the
// native names (testComputeDomainJob); operations, an upgrade and a tray
// leaving and rejoining during jobs (testComputeDomainOperations); and
// nvidia, NVIDIA-format manifests in the compatibility mode
// (testNVIDIAComputeDomains); fabric, a tray that boots with its NVLink
// fabric registration in progress (testComputeDomainFabric). The
// default chart is installed again at the end.
func TestComputeDomains(t *testing.T) {
	keepFailure(t)
	addRack(t)
	t.Cleanup(func() {
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			t.Errorf("reinstalling the default chart: %v", err)
		}
		removeOtherDriversClasses(t, compat.NVIDIADriverName)
	})
	t.Run("job", testComputeDomainJob)
	t.Run("operations", testComputeDomainOperations)
	t.Run("nvidia", testNVIDIAComputeDomains)
	t.Run("fabric", testComputeDomainFabric)
}

// testComputeDomainJob installs the chart with computeDomains.enabled on a
// simulated GB200 NVL72 rack (three trays, two cliques) and runs what a
// multi-node NVLink job does: a domain whose two pods land on the two trays
// of clique 1, each getting its allocated IMEX channel once the domain's
// IMEX daemons on both nodes formed their domain (the fake nvidia-imex is
// READY only when every peer of its node list answers over the pod
// network); beside it a second domain with allocationMode All on the tray
// of clique 2, whose pod gets every channel of its node. Deleting both
// leaves no daemon, label, template, node list or daemon directory behind.
// Before that, while the job runs, a plugin restart and a replaced daemon
// leave its pods running and the domain Ready again.
// Then a domain whose pods are pinned to trays of both cliques: the pod of
// the later clique never starts, with an event saying why.
func testComputeDomainJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := realCluster.InstallDriver(ctx, "computeDomains.enabled=true"); err != nil {
		t.Fatalf("install with computeDomains.enabled=true: %v", err)
	}
	names := compat.Default().ComputeDomain()

	ns := namespace(t)
	start := time.Now()
	applyYAML(t, ns, computeDomain("job", 2, "Single")+"---\n"+computeDomain("all", 1, "All"))
	applyYAML(t, ns, channelPod("job-0", "job", cdClique1[0])+"---\n"+channelPod("job-1", "job", cdClique1[1])+
		"---\n"+channelPod("all-0", "all", cdClique2))
	waitRunning(t, ns, "job-0", "job-1", "all-0")
	t.Logf("a two-node domain and a one-node domain: all three pods Running %s after the manifests were applied",
		time.Since(start).Round(100*time.Millisecond))

	job, all := domainStatus(t, ns, "job"), domainStatus(t, ns, "all")
	assertDomainNodes(t, job, cdClique1, rackClique1)
	assertDomainNodes(t, all, []string{cdClique2}, rackClique2)
	for _, n := range cdClique1 {
		assertNodeLabel(t, n, names.Label, string(job.UID))
	}
	assertNodeLabel(t, cdClique2, names.Label, string(all.UID))

	// Single: each pod sees the one channel it was allocated, nothing else.
	for _, name := range []string{"job-0", "job-1"} {
		assertOneChannel(t, ns, name)
	}
	// All: every channel its node publishes.
	if got, want := len(channelNodes(t, ns, "all-0")), nodeChannels(t, names.Driver, cdClique2); got != want {
		t.Errorf("all-0 (allocationMode All) sees %d channel device nodes, its node publishes %d channels", got, want)
	}
	// Each domain's daemons form their IMEX domain from the node list the
	// node side wrote: the addresses of the domain's nodes in the clique.
	wantList := []string{}
	for _, n := range job.Status.Nodes {
		wantList = append(wantList, n.IPAddress)
	}
	for _, n := range cdClique1 {
		if got := nodeList(t, n, names.Driver, string(job.UID)); !sameSet(got, wantList) {
			t.Errorf("node %s: the domain's node list is %v, want the domain's daemons %v", n, got, wantList)
		}
	}

	// While the job runs: the plugin pod of one of its nodes restarts
	// (both plugins; the channel plugin restores its claims from its
	// checkpoint), then the domain's daemon there is deleted and the
	// DaemonSet starts another, with a new address. The workload's pods
	// keep running, the domain becomes Ready again, both nodes' lists name
	// the new daemon.
	clusterCmd(t, "restart-plugin", cdClique1[0])
	waitDomainReady(t, ns, "job", len(cdClique1))
	release := realCluster.Config().Namespace
	old := daemonPodOn(t, release, names.Label, string(job.UID), cdClique1[0])
	mustKubectl(t, "-n", release, "delete", "pod", old.Name, "--wait=false")
	fresh := waitDomainReadyWithout(t, ns, "job", len(cdClique1), old.Status.PodIP)
	var addrs []string
	for _, n := range fresh.Status.Nodes {
		addrs = append(addrs, n.IPAddress)
	}
	for _, n := range cdClique1 {
		if got := nodeList(t, n, names.Driver, string(job.UID)); !sameSet(got, addrs) {
			t.Errorf("node %s: after the daemon was replaced, the node list is %v, want %v", n, got, addrs)
		}
	}
	assertKeptRunning(t, ns, "a plugin restart and a daemon replaced", "job-0", "job-1")

	// Cleanup: pods, then the domains.
	mustKubectl(t, "-n", ns, "delete", "pods", "--all", "--wait=true", "--timeout=2m")
	mustKubectl(t, "-n", ns, "delete", "computedomains.resource.gpudra.io", "--all", "--wait=true", "--timeout=2m")
	for _, cd := range []*v1alpha1.ComputeDomain{job, all} {
		assertDomainGone(t, ns, cd, names, rackNodes())
	}

	t.Run("across two cliques", func(t *testing.T) {
		ns := namespace(t)
		applyYAML(t, ns, computeDomain("split", 2, "Single"))
		// The pod of clique 1 first, so that it joins alone and runs; the
		// pod of clique 2 then finds the domain in clique 1.
		applyYAML(t, ns, channelPod("split-0", "split", cdClique1[1]))
		waitRunning(t, ns, "split-0")
		applyYAML(t, ns, channelPod("split-1", "split", cdClique2))
		note := waitPrepareFailure(t, ns, "split-1", "another NVLink clique")
		for _, want := range []string{cdClique1[1], "7b44.1", "7b44.2", "one clique"} {
			if !strings.Contains(note, want) {
				t.Errorf("the refusal %q does not name %q", note, want)
			}
		}
		if p := pod(t, ns, "split-1"); p.Status.Phase != v1.PodPending {
			t.Errorf("split-1 is %s; a pod in another clique than its domain's must not start", p.Status.Phase)
		}
		cd := domainStatus(t, ns, "split")
		mustKubectl(t, "-n", ns, "delete", "pods", "--all", "--wait=true", "--timeout=2m")
		mustKubectl(t, "-n", ns, "delete", "computedomains.resource.gpudra.io", "split", "--wait=true", "--timeout=2m")
		assertDomainGone(t, ns, cd, names, rackNodes())
	})
}

// Clique IDs of the simulated rack's trays (cluster UUID.clique).
const (
	rackClique1 = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44.1"
	rackClique2 = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44.2"
)

// addRack adds the simulated rack's three trays, removed after the test.
func addRack(t *testing.T) {
	t.Helper()
	rack := map[string]string{cdClique1[0]: "gb200-nvl72-tray", cdClique1[1]: "gb200-nvl72-tray",
		cdClique2: filepath.Join(repoRoot, "test", "localcluster", "profiles", "gb200-tray-clique2.yaml")}
	for _, n := range rackNodes() {
		clusterCmd(t, "add-node", n+"="+rack[n])
		t.Cleanup(func() { clusterCmd(t, "remove-node", n) })
	}
}

func rackNodes() []string { return append(slices.Clone(cdClique1), cdClique2) }

// assertOneChannel: the pod was allocated one channel device and sees
// exactly its device node.
func assertOneChannel(t *testing.T, ns, name string) {
	t.Helper()
	var channels []string
	for _, d := range claimResults(t, pod(t, ns, name)) {
		if strings.HasPrefix(d, "channel-") {
			channels = append(channels, d)
		}
	}
	if len(channels) != 1 {
		t.Fatalf("%s: allocated channels %v, want one", name, channels)
	}
	want := []string{"channel" + strings.TrimPrefix(channels[0], "channel-")}
	if got := channelNodes(t, ns, name); !slices.Equal(got, want) {
		t.Errorf("%s (allocated %s) sees channel device nodes %v, want %v", name, channels[0], got, want)
	}
}

// waitDomainReady waits until the domain is Ready with nodes nodes.
func waitDomainReady(t *testing.T, ns, name string, nodes int) *v1alpha1.ComputeDomain {
	t.Helper()
	return waitDomainReadyWithout(t, ns, name, nodes, "")
}

// waitDomainReadyWithout waits until the domain is Ready with nodes nodes,
// none of them at address gone.
func waitDomainReadyWithout(t *testing.T, ns, name string, nodes int, gone string) *v1alpha1.ComputeDomain {
	t.Helper()
	var cd *v1alpha1.ComputeDomain
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		cd = domainStatus(t, ns, name)
		if cd.Status.Status != v1alpha1.DomainReady || len(cd.Status.Nodes) != nodes {
			return false, nil
		}
		return !slices.ContainsFunc(cd.Status.Nodes, func(n v1alpha1.ComputeDomainNode) bool { return n.IPAddress == gone }), nil
	})
	if err != nil {
		t.Fatalf("domain %s not Ready with %d nodes (none at %q): %v; status %+v", name, nodes, gone, err, cd.Status)
	}
	return cd
}

// daemonPodOn is the domain's IMEX daemon pod on node.
func daemonPodOn(t *testing.T, release, label, uid, node string) *v1.Pod {
	t.Helper()
	pods, err := client.CoreV1().Pods(release).List(context.Background(), metav1.ListOptions{
		LabelSelector: label + "=" + uid, FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the daemon pod of domain %s on %s: %v (%d pods)", uid, node, err, len(pods.Items))
	}
	return &pods.Items[0]
}

func computeDomain(name string, nodes int, mode string) string {
	return fmt.Sprintf(`apiVersion: resource.gpudra.io/v1alpha1
kind: ComputeDomain
metadata: {name: %s}
spec:
  numNodes: %d
  channel:
    resourceClaimTemplate: {name: %s-channel}
    allocationMode: %s
`, name, nodes, name, mode)
}

// channelPod is a pod of domain's workload on node, with one claim from
// the domain's channel template.
func channelPod(name, domain, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {domain: %s}}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr
    image: registry.local/gpudra/workload:local
    command: [bash, -c, "sleep 1d"]
    resources: {claims: [{name: channel}]}
  resourceClaims:
  - name: channel
    resourceClaimTemplateName: %s-channel
`, name, domain, node, domain)
}

func domainStatus(t testing.TB, ns, name string) *v1alpha1.ComputeDomain {
	t.Helper()
	return domainIn(t, "computedomains.resource.gpudra.io", ns, name)
}

// domainIn reads a ComputeDomain of resource (the native group's or
// NVIDIA's).
func domainIn(t testing.TB, resource, ns, name string) *v1alpha1.ComputeDomain {
	t.Helper()
	var cd v1alpha1.ComputeDomain
	out := mustKubectl(t, "-n", ns, "get", resource, name, "-o", "json")
	if err := json.Unmarshal([]byte(out), &cd); err != nil {
		t.Fatalf("ComputeDomain %s: %v", name, err)
	}
	return &cd
}

// assertDomainNodes: the domain is Ready with exactly nodes, all Ready, of
// clique, at the indexes 0..n-1.
func assertDomainNodes(t *testing.T, cd *v1alpha1.ComputeDomain, nodes []string, clique string) {
	t.Helper()
	var got []string
	var idx []int
	for _, n := range cd.Status.Nodes {
		got = append(got, n.Name)
		idx = append(idx, int(n.Index))
		if n.CliqueID != clique || n.Status != v1alpha1.DomainReady || n.IPAddress == "" {
			t.Errorf("domain %s: node entry %+v, want Ready in clique %s with an address", cd.Name, n, clique)
		}
	}
	slices.Sort(idx)
	if !sameSet(got, nodes) || cd.Status.Status != v1alpha1.DomainReady {
		t.Errorf("domain %s: status %s with nodes %v, want Ready with %v", cd.Name, cd.Status.Status, got, nodes)
	}
	for i, x := range idx {
		if x != i {
			t.Errorf("domain %s: node indexes %v, want 0..%d", cd.Name, idx, len(nodes)-1)
			break
		}
	}
}

func assertNodeLabel(t *testing.T, node, label, want string) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[label]; got != want {
		t.Errorf("node %s: label %s=%q, want %q", node, label, got, want)
	}
}

// claimResults are the devices allocated to the pod's claims.
func claimResults(t *testing.T, p *v1.Pod) []string {
	t.Helper()
	var out []string
	for _, name := range podClaimNames(p) {
		c, err := client.ResourceV1().ResourceClaims(p.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				out = append(out, r.Device)
			}
		}
	}
	return out
}

// channelNodes lists the IMEX channel device nodes the pod's container
// sees (character devices only).
func channelNodes(t *testing.T, ns, name string) []string {
	t.Helper()
	out := mustKubectl(t, "-n", ns, "exec", name, "--", "bash", "-c",
		`cd /dev/nvidia-caps-imex-channels 2>/dev/null || exit 0; for f in *; do [ -c "$f" ] && echo "$f"; done`)
	return strings.Fields(out)
}

// nodeChannels counts the channel devices the node's pool publishes.
func nodeChannels(t *testing.T, driver, node string) int {
	t.Helper()
	slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: "spec.driver=" + driver + ",spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if strings.HasPrefix(d.Name, "channel-") {
				n++
			}
		}
	}
	return n
}

// nodeList reads the node list the node side wrote for domain uid on node.
func nodeList(t *testing.T, node, driver, uid string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(kubeletDir(node), "plugins", driver, "domains", uid, computedomain.NodesConfigFile))
	if err != nil {
		t.Fatalf("node %s: the node list of domain %s: %v", node, uid, err)
	}
	return strings.Fields(string(data))
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// waitPrepareFailure waits for an event on the pod whose note contains
// want (the kubelet's FailedPrepareDynamicResources) and returns its note.
func waitPrepareFailure(t *testing.T, ns, podName, want string) string {
	t.Helper()
	var note string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + podName})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, want) {
				note = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		out, _ := kubectl("-n", ns, "describe", "pod", podName)
		t.Fatalf("no event on pod %s containing %q: %v\n%s", podName, want, err, out)
	}
	t.Logf("pod %s: %s", podName, note)
	return note
}

// assertDomainGone: after the domain was deleted, nothing of it is left:
// its DaemonSet and templates, its label on nodes, its node lists and the
// daemons' directories in the driver roots of nodes.
func assertDomainGone(t testing.TB, ns string, cd *v1alpha1.ComputeDomain, names compat.ComputeDomainNames, nodes []string) {
	t.Helper()
	release := realCluster.Config().Namespace
	uid := string(cd.UID)
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = nil
		if _, err := client.AppsV1().DaemonSets(release).Get(ctx, "computedomain-"+uid, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "DaemonSet")
		}
		if _, err := client.ResourceV1().ResourceClaimTemplates(release).Get(ctx, "computedomain-"+uid, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "daemon template")
		}
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, cd.Spec.Channel.ResourceClaimTemplate.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "channel template")
		}
		pods, err := client.CoreV1().Pods(release).List(ctx, metav1.ListOptions{LabelSelector: names.Label + "=" + uid})
		if err != nil || len(pods.Items) > 0 {
			left = append(left, "daemon pods")
		}
		for _, n := range nodes {
			node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || node.Labels[names.Label] == uid {
				left = append(left, "label on "+n)
			}
			if _, err := os.Stat(filepath.Join(kubeletDir(n), "plugins", names.Driver, "domains", uid)); !os.IsNotExist(err) {
				left = append(left, "node list on "+n)
			}
			if _, err := os.Stat(filepath.Join(driverRoot(n), imex.WorkDirBase, uid)); !os.IsNotExist(err) {
				left = append(left, "daemon directory in the driver root of "+n)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("domain %s deleted, still there: %s", cd.Name, strings.Join(left, ", "))
	}
}
