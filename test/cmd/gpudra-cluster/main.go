// Command gpudra-cluster runs the local cluster of test/localcluster: a real
// control plane, per simulated GPU node a container runtime (containerd, or
// CRI-O for a node added with --runtime=crio) and a kubelet, and the
// driver installed with its Helm chart.
//
//	gpudra-cluster up [--nodes "gpu-h100=dgx-h100 gpu-mixed=mixed"]
//	gpudra-cluster down | status | kubeconfig
//	gpudra-cluster helm-upgrade [KEY=VALUE...]   # helm upgrade, wait for the rollout
//	gpudra-cluster restart-plugin NODE           # delete the node's plugin pod, wait for the new one
//	gpudra-cluster stop-plugin NODE              # label the node gpudra.io/kubelet-plugin=false, wait until its plugin pod is gone
//	gpudra-cluster start-plugin NODE             # remove that label, wait for a Ready plugin pod
//	gpudra-cluster add-node NAME=PROFILE [--runtime=crio] [PLUGIN-FLAG...]  # join one more node; with plugin flags, a chart node group of its own
//	gpudra-cluster remove-node NODE              # stop it, delete the Node and its ResourceSlices, drop its node group
//	gpudra-cluster stop-controller | start-controller      # scale the controller Deployment to 0 / back
//	gpudra-cluster inject-fault NODE GPU FAULT... | clear-faults NODE
//	gpudra-cluster nvidia-smi NODE ARGS...        # the node's (fake) nvidia-smi, e.g. MIG set-up
//	gpudra-cluster host-path NODE PATH           # where a path of the node's file system is on the host
//	gpudra-cluster plugin-metrics-url NODE | controller-metrics-url
//	gpudra-cluster stop-apiserver | start-apiserver  # an API server outage (the fault suite)
//	gpudra-cluster import-image TAR                  # into every node's runtime
//	gpudra-cluster plugin-pids NODE                  # host PIDs of the node's plugin processes
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpudra/gpudra/test/localcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	def := localcluster.DefaultConfig(repoRoot(wd))
	fs := flag.NewFlagSet("gpudra-cluster", flag.ExitOnError)
	dir := fs.String("dir", envOr("GPUDRA_LOCALCLUSTER_DIR", def.Dir), "cluster directory")
	nodes := fs.String("nodes", os.Getenv("GPUDRA_LOCALCLUSTER_NODES"), "up: NAME=PROFILE list (default: "+nodeList(def.Nodes)+")")
	wait := fs.Duration("wait-timeout", def.WaitTimeout, "up: time allowed per readiness step")
	if len(os.Args) < 2 {
		return fmt.Errorf("usage: gpudra-cluster up|down|status|kubeconfig|helm-upgrade|restart-plugin|stop-plugin|start-plugin|" +
			"add-node|remove-node|stop-controller|start-controller|inject-fault|clear-faults|nvidia-smi|host-path|plugin-metrics-url|" +
			"controller-metrics-url|stop-apiserver|start-apiserver|import-image|plugin-pids (see `go doc ./test/cmd/gpudra-cluster`)")
	}
	cmd := os.Args[1]
	if err := fs.Parse(os.Args[2:]); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	args := fs.Args()
	if cmd == "up" {
		cfg := def
		cfg.Dir, cfg.WaitTimeout = *dir, *wait
		if *nodes != "" {
			if cfg.Nodes, err = localcluster.ParseNodes(*nodes); err != nil {
				return err
			}
		}
		start := time.Now()
		if err := localcluster.New(cfg, os.Stdout).Up(ctx); err != nil {
			return err
		}
		fmt.Printf("cluster up in %.1fs\n", time.Since(start).Seconds())
		return nil
	}
	c, err := localcluster.Open(*dir, os.Stdout)
	if err != nil {
		if cmd == "down" {
			fmt.Println("no cluster in", *dir)
			return nil
		}
		return err
	}
	switch {
	case cmd == "down":
		return c.Down(ctx)
	case cmd == "status":
		return c.Status(ctx)
	case cmd == "kubeconfig":
		fmt.Println(c.AdminKubeconfig())
		return nil
	case cmd == "helm-upgrade":
		return c.InstallDriver(ctx, args...)
	case cmd == "restart-plugin" && len(args) == 1:
		return c.RestartPlugin(ctx, args[0])
	case cmd == "stop-plugin" && len(args) == 1:
		return c.StopPlugin(ctx, args[0])
	case cmd == "start-plugin" && len(args) == 1:
		return c.StartPlugin(ctx, args[0])
	case cmd == "add-node" && len(args) >= 1:
		nodes, err := localcluster.ParseNodes(args[0])
		if err != nil {
			return fmt.Errorf("add-node NAME=PROFILE [PLUGIN-FLAG...]: %q: %w", args[0], err)
		}
		if len(nodes) != 1 {
			return fmt.Errorf("add-node NAME=PROFILE [PLUGIN-FLAG...]: %q names %d nodes; add one at a time", args[0], len(nodes))
		}
		return c.AddNode(ctx, nodes[0], args[1:]...)
	case cmd == "remove-node" && len(args) == 1:
		return c.RemoveNode(ctx, args[0])
	case cmd == "stop-controller" && len(args) == 0:
		return c.StopController(ctx)
	case cmd == "start-controller" && len(args) == 0:
		return c.StartController(ctx)
	case cmd == "host-path" && len(args) == 2:
		fmt.Println(c.Node(args[0]).HostPathOf(args[1]))
		return nil
	case cmd == "plugin-metrics-url" && len(args) == 1:
		url, err := c.PluginMetricsURL(ctx, args[0])
		if err == nil {
			fmt.Println(url)
		}
		return err
	case cmd == "controller-metrics-url" && len(args) == 0:
		url, err := c.ControllerMetricsURL(ctx)
		if err == nil {
			fmt.Println(url)
		}
		return err
	case cmd == "inject-fault" && len(args) >= 3:
		return c.InjectFault(args[0], args[1:]...)
	case cmd == "clear-faults" && len(args) == 1:
		return c.ClearFaults(args[0])
	case cmd == "nvidia-smi" && len(args) >= 2:
		out, err := c.NvidiaSMI(ctx, args[0], args[1:]...)
		if err == nil {
			fmt.Print(out)
		}
		return err
	case cmd == "stop-apiserver" && len(args) == 0:
		return c.StopAPIServer()
	case cmd == "start-apiserver" && len(args) == 0:
		return c.StartAPIServer(ctx)
	case cmd == "import-image" && len(args) == 1:
		return c.ImportImage(ctx, args[0])
	case cmd == "plugin-pids" && len(args) == 1:
		pids, err := c.PluginPIDs(args[0])
		for _, p := range pids {
			fmt.Println(p)
		}
		return err
	}
	return fmt.Errorf("unknown command or wrong arguments: %s %v", cmd, args)
}

// repoRoot finds the checkout from the working directory (make runs us there).
func repoRoot(wd string) string {
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "deployments", "helm", "gpudra", "Chart.yaml")); err == nil {
			return d
		}
	}
	return wd
}

func envOr(k, v string) string {
	if s := os.Getenv(k); s != "" {
		return s
	}
	return v
}

func nodeList(nodes []localcluster.NodeSpec) string {
	s := ""
	for i, n := range nodes {
		if i > 0 {
			s += " "
		}
		s += n.Name + "=" + n.Profile
	}
	return s
}
