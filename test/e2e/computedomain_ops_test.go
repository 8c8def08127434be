//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/images"
)

// testComputeDomainOperations is what an operator does to a rack while
// jobs run on it, on the two trays of clique 1:
//   - two one-node domains side by side on the same clique stay apart: each
//     node carries its own domain's label and a node list naming only its
//     own daemon, and holds nothing of the other domain;
//   - a tray leaves the cluster (its Node deleted) and joins again: the
//     domain loses the node, and a new pod on the rejoined tray makes it
//     Ready again with the new daemon;
//   - a helm upgrade to a new image that rolls every plugin pod and the
//     controller leaves both workloads running and both domains Ready
//     again; the controller moves each domain's DaemonSet to the new image
//     without replacing a running daemon (OnDelete), a daemon pod deleted
//     then comes back with the new image, and a pod created after it gets
//     a channel.
//
// Deleting both domains then leaves nothing of them on either tray.
func testComputeDomainOperations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := realCluster.InstallDriver(ctx, "computeDomains.enabled=true"); err != nil {
		t.Fatalf("install with computeDomains.enabled=true: %v", err)
	}
	names := compat.Default().ComputeDomain()
	left, right := cdClique1[0], cdClique1[1]

	ns := namespace(t)
	applyYAML(t, ns, computeDomain("left", 1, "Single")+"---\n"+computeDomain("right", 1, "Single"))
	applyYAML(t, ns, channelPod("left-0", "left", left)+"---\n"+channelPod("right-0", "right", right))
	waitRunning(t, ns, "left-0", "right-0")
	l, r := domainStatus(t, ns, "left"), domainStatus(t, ns, "right")
	assertDomainNodes(t, l, []string{left}, rackClique1)
	assertDomainNodes(t, r, []string{right}, rackClique1)
	assertApart(t, names, map[string]*v1alpha1.ComputeDomain{left: l, right: r})
	for _, name := range []string{"left-0", "right-0"} {
		assertOneChannel(t, ns, name)
	}

	// The right tray leaves: its Node is deleted, so are its pods.
	clusterCmd(t, "remove-node", right)
	waitPodGone(t, ns, "right-0", 3*time.Minute)
	waitDomainNodes(t, ns, "right", 0)
	// ... and joins again, as a fresh node of the same name.
	clusterCmd(t, "add-node", right+"=gb200-nvl72-tray")
	applyYAML(t, ns, channelPod("right-1", "right", right))
	waitRunning(t, ns, "right-1")
	r = waitDomainReady(t, ns, "right", 1)
	assertDomainNodes(t, r, []string{right}, rackClique1)
	assertApart(t, names, map[string]*v1alpha1.ComputeDomain{left: domainStatus(t, ns, "left"), right: r})
	assertOneChannel(t, ns, "right-1")
	assertKeptRunning(t, ns, "the other tray leaving and rejoining", "left-0")

	// An upgrade to a new image (the same content under another tag, on
	// every node: the local cluster has no registry, so this comes after the
	// tray rejoined) that rolls every plugin pod and the controller's.
	release := realCluster.Config().Namespace
	oldImage, newImage := upgradeImage(ctx, t)
	if err := realCluster.InstallDriver(ctx, "computeDomains.enabled=true", "image.tag="+upgradeTag,
		"kubeletPlugin.logVerbosity=3", "controller.logVerbosity=3"); err != nil {
		t.Fatalf("helm upgrade during the jobs: %v", err)
	}
	l, r = waitDomainReady(t, ns, "left", 1), waitDomainReady(t, ns, "right", 1)
	assertKeptRunning(t, ns, "an upgrade", "left-0", "right-1")
	assertApart(t, names, map[string]*v1alpha1.ComputeDomain{left: l, right: r})
	// The controller brings each domain's DaemonSet to the new image, and
	// (OnDelete) replaces no running daemon: both keep the old image until
	// their pod is deleted; the replacement runs the new one.
	for node, cd := range map[string]*v1alpha1.ComputeDomain{left: l, right: r} {
		waitDaemonSetImage(t, release, names.Label, string(cd.UID), newImage)
		if got := daemonPodOn(t, release, names.Label, string(cd.UID), node).Spec.Containers[0].Image; got != oldImage {
			t.Errorf("domain %s's daemon on %s runs %s after the upgrade; OnDelete keeps %s until its pod is deleted", cd.Name, node, got, oldImage)
		}
	}
	stale := daemonPodOn(t, release, names.Label, string(l.UID), left)
	mustKubectl(t, "-n", release, "delete", "pod", stale.Name, "--wait=false")
	l = waitDomainReadyWithout(t, ns, "left", 1, stale.Status.PodIP)
	if got := daemonPodOn(t, release, names.Label, string(l.UID), left).Spec.Containers[0].Image; got != newImage {
		t.Errorf("the daemon that replaced %s runs %s, want the upgraded %s", stale.Name, got, newImage)
	}
	assertKeptRunning(t, ns, "a daemon replaced after the upgrade", "left-0", "right-1")
	applyYAML(t, ns, channelPod("left-1", "left", left))
	mustKubectl(t, "-n", ns, "delete", "pod", "left-0", "--wait=true", "--timeout=2m")
	waitRunning(t, ns, "left-1")
	assertOneChannel(t, ns, "left-1")

	mustKubectl(t, "-n", ns, "delete", "pods", "--all", "--wait=true", "--timeout=2m")
	mustKubectl(t, "-n", ns, "delete", "computedomains.resource.gpudra.io", "--all", "--wait=true", "--timeout=2m")
	for _, cd := range []*v1alpha1.ComputeDomain{l, r} {
		assertDomainGone(t, ns, cd, names, rackNodes())
	}
}

// assertApart: each node of domains carries its own domain's label, its
// node list names exactly its own domain's daemons, and it holds no node
// list of any other domain.
func assertApart(t *testing.T, names compat.ComputeDomainNames, domains map[string]*v1alpha1.ComputeDomain) {
	t.Helper()
	for node, cd := range domains {
		uid := string(cd.UID)
		assertNodeLabel(t, node, names.Label, uid)
		var want []string
		for _, n := range cd.Status.Nodes {
			want = append(want, n.IPAddress)
		}
		if got := nodeList(t, node, names.Driver, uid); !sameSet(got, want) {
			t.Errorf("node %s: domain %s's node list is %v, want only its own daemons %v", node, cd.Name, got, want)
		}
		for other, o := range domains {
			if other == node {
				continue
			}
			dir := filepath.Join(kubeletDir(node), "plugins", names.Driver, "domains", string(o.UID))
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("node %s (domain %s) holds %s of domain %s (err %v)", node, cd.Name, dir, o.Name, err)
			}
		}
	}
}

// assertKeptRunning: the pods are Running and none of their containers
// restarted through what happened.
func assertKeptRunning(t *testing.T, ns, what string, names ...string) {
	t.Helper()
	for _, name := range names {
		p := pod(t, ns, name)
		if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s after %s: %s, container statuses %+v; the workload must keep running", name, what, p.Status.Phase, p.Status.ContainerStatuses)
		}
	}
}

// waitDomainNodes waits until the domain's status lists n nodes.
func waitDomainNodes(t *testing.T, ns, name string, n int) {
	t.Helper()
	var cd *v1alpha1.ComputeDomain
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		cd = domainStatus(t, ns, name)
		return len(cd.Status.Nodes) == n, nil
	})
	if err != nil {
		t.Fatalf("domain %s: status %+v, want %d nodes: %v", name, cd.Status, n, err)
	}
}

// upgradeTag is the tag an upgrade test installs: the gpudra image under a
// second name (TagImage), so that the upgrade changes the image's name as a
// release does.
const upgradeTag = "e2e-upgrade"

// upgradeImage tags the installed gpudra image as upgradeTag on every node
// and returns both names.
func upgradeImage(ctx context.Context, t *testing.T) (oldImage, newImage string) {
	t.Helper()
	oldImage, err := images.GpudraImageName(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, _, _ := strings.Cut(oldImage, ":")
	newImage = repo + ":" + upgradeTag
	if err := realCluster.TagImage(ctx, oldImage, newImage); err != nil {
		t.Fatal(err)
	}
	return oldImage, newImage
}

// waitDaemonSetImage waits until the DaemonSet of domain uid runs image in
// its template.
func waitDaemonSetImage(t *testing.T, release, label, uid, image string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.AppsV1().DaemonSets(release).List(ctx, metav1.ListOptions{LabelSelector: label + "=" + uid})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		got = nil
		for _, c := range l.Items[0].Spec.Template.Spec.Containers {
			got = append(got, c.Image)
		}
		return len(got) > 0 && !slices.ContainsFunc(got, func(s string) bool { return s != image }), nil
	})
	if err != nil {
		t.Fatalf("the DaemonSet of domain %s does not run %s after the upgrade (its containers: %v): %v", uid, image, got, err)
	}
}
