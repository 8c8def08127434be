//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpudra/gpudra/test/localcluster"
)

func clusterCmd(t testing.TB, args ...string) {
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
		t.Fatalf("the harness has no operation %q", strings.Join(args, " "))
	}
	if err != nil {
		t.Fatalf("cluster %v: %v", args, err)
	}
}

// containerView is what a running container got, read from inside it.
type containerView struct {
	// Pod is "<namespace>/<name>".
	Pod, PodUID, Container string
	// Env is the process environment (KEY=VALUE).
	Env    []string
	Mounts []hostMount
}

// hostMount is a mount of the container: Source is the host path of a bind
// mount from the host's file system, Options the mount's own options
// (mountinfo's fifth field: rw, nosuid, nodev, ...).
type hostMount struct {
	Source, Destination string
	Options             []string
}

// Getenv returns the value of an environment variable of the container
// (the last one, as a process's getenv would).
func (c containerView) Getenv(key string) (string, bool) {
	value, found := "", false
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			value, found = v, true
		}
	}
	return value, found
}

// injection reads what a running container got, from inside it (kubectl
// exec): its environment and its mounts, whose source is the host path (the
// mountinfo root of a bind mount from the host's file system).
func injection(t *testing.T, p *v1.Pod, container string) containerView {
	t.Helper()
	inj := containerView{Pod: p.Namespace + "/" + p.Name, PodUID: string(p.UID), Container: container}
	env := mustKubectl(t, "-n", p.Namespace, "exec", p.Name, "-c", container, "--", "env")
	inj.Env = strings.Split(strings.TrimSpace(env), "\n")
	mi := mustKubectl(t, "-n", p.Namespace, "exec", p.Name, "-c", container, "--", "cat", "/proc/self/mountinfo")
	for _, line := range strings.Split(mi, "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			inj.Mounts = append(inj.Mounts, hostMount{Source: f[3], Destination: f[4], Options: strings.Split(f[5], ",")})
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

// nodePath turns a host path under a node's directories into the path the
// node's processes see (the plugin's pod mounts the node's paths); other
// paths are returned as they are.
func nodePath(hostPath string) string {
	for _, n := range realCluster.Config().Nodes {
		root := realCluster.Node(n.Name).HostPath("/")
		if rest, ok := strings.CutPrefix(hostPath, root); ok {
			return "/" + strings.TrimPrefix(rest, "/")
		}
	}
	return hostPath
}
