//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpudra/gpudra/test/fakecri"
	"github.com/gpudra/gpudra/test/localcluster"
)

// realClusterCmd is clusterCmd on the containerd cluster.
func realClusterCmd(t testing.TB, args ...string) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch {
	case len(args) == 2 && args[0] == "restart-plugin":
		err = realCluster.RestartPlugin(ctx, args[1])
	case len(args) >= 4 && args[0] == "inject-fault":
		err = realCluster.InjectFault(args[1], args[2:]...)
	case len(args) == 2 && args[0] == "clear-faults":
		err = realCluster.ClearFaults(args[1])
	case len(args) == 2 && args[0] == "stop-plugin":
		err = realCluster.StopPlugin(ctx, args[1])
	case len(args) == 2 && args[0] == "start-plugin":
		err = realCluster.StartPlugin(ctx, args[1])
	case len(args) >= 2 && args[0] == "add-node":
		var nodes []localcluster.NodeSpec
		if nodes, err = localcluster.ParseNodes(args[1]); err == nil {
			err = realCluster.AddNode(ctx, nodes[0], args[2:]...)
		}
	case len(args) == 2 && args[0] == "remove-node":
		// A cleanup may remove a node the test has removed already.
		if slices.ContainsFunc(realCluster.Config().Nodes, func(n localcluster.NodeSpec) bool { return n.Name == args[1] }) {
			err = realCluster.RemoveNode(ctx, args[1])
		}
	case len(args) == 1 && args[0] == "stop-controller":
		err = realCluster.StopController(ctx)
	case len(args) == 1 && args[0] == "start-controller":
		err = realCluster.StartController(ctx)
	default:
		requireFakeRuntime(t, "cluster.sh "+args[0]+" has no counterpart on the containerd cluster")
	}
	if err != nil {
		t.Fatalf("cluster %v: %v", args, err)
	}
}

// realInjection reads what a running container of the containerd cluster
// got, from inside it (kubectl exec): its environment and its mounts, whose
// source is the host path (the mountinfo root of a bind mount from the
// host's file system).
func realInjection(t *testing.T, p *v1.Pod, container string) fakecri.Injection {
	t.Helper()
	inj := fakecri.Injection{Pod: p.Namespace + "/" + p.Name, PodUID: string(p.UID), Container: container}
	env := mustKubectl(t, "-n", p.Namespace, "exec", p.Name, "-c", container, "--", "env")
	inj.Env = strings.Split(strings.TrimSpace(env), "\n")
	mi := mustKubectl(t, "-n", p.Namespace, "exec", p.Name, "-c", container, "--", "cat", "/proc/self/mountinfo")
	for _, line := range strings.Split(mi, "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			inj.Mounts = append(inj.Mounts, fakecri.Mount{Source: f[3], Destination: f[4]})
		}
	}
	return inj
}

func mustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// realPluginMetricsURL is the /metrics of the node's plugin pod.
func realPluginMetricsURL(t *testing.T, node string) string {
	t.Helper()
	url, err := realCluster.PluginMetricsURL(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// nodePath turns a host path under a node's directories into the path the
// node's processes see (the plugin's pod mounts the node's paths); other
// paths, and every path on the fast cluster, are returned as they are.
func nodePath(hostPath string) string {
	if !realRuntime {
		return hostPath
	}
	for _, n := range realCluster.Config().Nodes {
		root := realCluster.Node(n.Name).HostPath("/")
		if rest, ok := strings.CutPrefix(hostPath, root); ok {
			return "/" + strings.TrimPrefix(rest, "/")
		}
	}
	return hostPath
}
