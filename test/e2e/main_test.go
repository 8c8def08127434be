//go:build e2e

// Package e2e runs gpudra against the real local cluster (test/cluster):
// apiserver admission, scheduler allocation from our ResourceSlices,
// controller-manager claim templates, kubelet NodePrepareResources through
// the plugin's dra.sock, and CDI injection by the fake container runtime.
//
// make e2e starts the cluster if needed and tears it down afterwards
// (E2E_KEEP_CLUSTER=1 keeps it).
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpudra/gpudra/test/localcluster"
)

var (
	repoRoot   string
	clusterSh  string
	kubectlBin string
	kubeconfig string
	clusterDir string
	client     kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// realRuntime selects the cluster: containerd (the default) is the local
// cluster of test/localcluster — a containerd per node, the driver installed
// with its Helm chart, the plugin and the controller as pods; fake
// (E2E_RUNTIME=fake) is test/cluster/cluster.sh — the fake CRI, the plugin
// as a host process in the chart's shape — which some tests need (see
// requireFakeRuntime).
var realRuntime = os.Getenv("E2E_RUNTIME") != "fake"

// realCluster is the containerd cluster when realRuntime.
var realCluster *localcluster.Cluster

func run(m *testing.M) int {
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	clusterSh = filepath.Join(repoRoot, "test", "cluster", "cluster.sh")
	kubectlBin = filepath.Join(repoRoot, "_output", "bin", "kubectl")
	var down func()
	var err error
	if realRuntime {
		down, err = upRealCluster()
	} else {
		down, err = upFakeCluster()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv("E2E_KEEP_CLUSTER") != "1" {
		defer down()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "load kubeconfig %s: %v\n", kubeconfig, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 100, 200
	client = kubernetes.NewForConfigOrDie(cfg)
	if !realRuntime {
		// The chart's controller manages the DeviceClasses on the real
		// cluster; the fast one gets the static ones.
		if out, err := kubectl("apply", "-f", filepath.Join(repoRoot, "deployments", "static")); err != nil {
			fmt.Fprintf(os.Stderr, "install DeviceClasses: %v\n%s\n", err, out)
			return 1
		}
	}
	return m.Run()
}

func upRealCluster() (func(), error) {
	cfg := localcluster.DefaultConfig(repoRoot)
	if d := os.Getenv("GPUDRA_LOCALCLUSTER_DIR"); d != "" {
		cfg.Dir = d
	}
	realCluster = localcluster.New(cfg, os.Stderr)
	ctx := context.Background()
	if err := realCluster.Up(ctx); err != nil {
		return nil, fmt.Errorf("cluster up: %w", err)
	}
	clusterDir = cfg.Dir
	kubeconfig = realCluster.AdminKubeconfig()
	return func() {
		// Read the cluster's record again: the CLI (the notebooks'
		// gpudra-cluster add-node) may have added nodes since.
		c := realCluster
		if again, err := localcluster.Open(cfg.Dir, os.Stderr); err == nil {
			c = again
		}
		if err := c.Down(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "cluster down: %v\n", err)
		}
	}, nil
}

func upFakeCluster() (func(), error) {
	clusterDir = os.Getenv("GPUDRA_CLUSTER_DIR")
	if clusterDir == "" {
		clusterDir = filepath.Join(repoRoot, "_output", "cluster")
	}
	if out, err := exec.Command(clusterSh, "up").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cluster up failed: %w\n%s", err, out)
	}
	out, err := exec.Command(clusterSh, "kubeconfig").Output()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	kubeconfig = strings.TrimSpace(string(out))
	return func() {
		if out, err := exec.Command(clusterSh, "down").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster down failed: %v\n%s\n", err, out)
		}
	}, nil
}

// requireFakeRuntime skips a test on the containerd cluster: it needs what
// only the fast cluster offers (why says what).
func requireFakeRuntime(t testing.TB, why string) {
	t.Helper()
	if realRuntime {
		t.Skipf("fake runtime only (E2E_RUNTIME=fake): %s", why)
	}
}

// kubectl runs the cluster's kubectl with the admin kubeconfig.
func kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// clusterCmd runs a cluster.sh subcommand (e.g. restart-plugin gpu-h100).
// On the containerd cluster they are test/localcluster's operations (see
// realClusterCmd): restart-plugin deletes the node's plugin pod and waits
// for the DaemonSet's new one; stop-plugin/start-plugin set and remove the
// node label that keeps the chart's plugin DaemonSets off the node;
// add-node joins a node to the running cluster (with plugin flags, under a
// node group of the chart of its own), remove-node takes it out;
// stop-controller/start-controller scale the controller Deployment;
// inject-fault and clear-faults edit the node's fault file.
func clusterCmd(t testing.TB, args ...string) {
	t.Helper()
	if realRuntime {
		realClusterCmd(t, args...)
		return
	}
	out, err := exec.Command(clusterSh, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh %v: %v\n%s", args, err, out)
	}
}

// nodeDir is where a node's kubelet, plugin state and CDI specs live.
func nodeDir(node string) string { return filepath.Join(clusterDir, "nodes", node) }

// driverRoot is a node's simulated driver root (test/fakedriver), which its
// plugin sees at the chart's /driver-root.
func driverRoot(node string) string {
	if realRuntime {
		return realCluster.Node(node).DriverRoot()
	}
	return filepath.Join(nodeDir(node), "driver-root")
}

func cdiDir(node string) string {
	if realRuntime {
		return realCluster.Node(node).HostPath(localcluster.CDIDir)
	}
	return filepath.Join(nodeDir(node), "cdi")
}

// kubeletDir is a node's kubelet root dir as the host sees it.
func kubeletDir(node string) string {
	if realRuntime {
		return realCluster.Node(node).HostPath(localcluster.KubeletRoot)
	}
	return filepath.Join(nodeDir(node), "kubelet")
}

// checkpointDir holds this boot's checkpoint records of a node's plugin.
func checkpointDir(node string) string {
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		panic(err)
	}
	return filepath.Join(kubeletDir(node), "plugins", "gpu.gpudra.io", "checkpoint", strings.TrimSpace(string(bootID)))
}
