//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// testComputeDomainOperations is what an operator does to a rack while
// jobs run on it, on the two trays of clique 1:
//   - two one-node domains side by side on the same clique stay apart: each
//     node carries its own domain's label and a node list naming only its
//     own daemon, and holds nothing of the other domain;
//   - a helm upgrade that rolls every plugin pod and the controller leaves
//     both workloads running, both domains Ready again, and a pod created
//     after it gets a channel;
//   - a tray leaves the cluster (its Node deleted) and joins again: the
//     domain loses the node, and a new pod on the rejoined tray makes it
//     Ready again with the new daemon.
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

	// An upgrade that rolls every plugin pod and the controller's.
	if err := realCluster.InstallDriver(ctx, "computeDomains.enabled=true",
		"kubeletPlugin.logVerbosity=3", "controller.logVerbosity=3"); err != nil {
		t.Fatalf("helm upgrade during the jobs: %v", err)
	}
	l, r = waitDomainReady(t, ns, "left", 1), waitDomainReady(t, ns, "right", 1)
	assertKeptRunning(t, ns, "an upgrade", "left-0", "right-0")
	assertApart(t, names, map[string]*v1alpha1.ComputeDomain{left: l, right: r})
	applyYAML(t, ns, channelPod("left-1", "left", left))
	mustKubectl(t, "-n", ns, "delete", "pod", "left-0", "--wait=true", "--timeout=2m")
	waitRunning(t, ns, "left-1")
	assertOneChannel(t, ns, "left-1")

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
	assertKeptRunning(t, ns, "the other tray leaving and rejoining", "left-1")

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
