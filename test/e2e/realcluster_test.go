//go:build e2e

package e2e

import (
	"context"
	"net"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpudra/gpudra/test/fakecri"
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

// realPluginMetricsURL is the /metrics of the node's plugin pod: its pod IP
// (reachable from the host through the node's bridge) and the port of its
// --metrics-address flag.
func realPluginMetricsURL(t *testing.T, node string) string {
	t.Helper()
	p, err := realCluster.PluginPod(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Spec.Containers {
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if addr, ok := strings.CutPrefix(a, "--metrics-address="); ok {
				_, port, _ := strings.Cut(addr, ":")
				return "http://" + net.JoinHostPort(p.Status.PodIP, port) + "/metrics"
			}
		}
	}
	t.Fatalf("plugin pod %s has no --metrics-address", p.Name)
	return ""
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
