//go:build e2e

// Package e2e runs gpudra against the local cluster of test/localcluster:
// a real control plane, a kubelet and a containerd per simulated GPU node,
// the driver installed with its Helm chart (the plugin and the controller
// as pods), workloads as real containers whose devices CDI injected.
//
// make e2e starts the cluster if needed and tears it down afterwards
// (E2E_KEEP_CLUSTER=1 keeps it).
package e2e

import (
	"context"
	"flag"
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
	kubectlBin string
	kubeconfig string
	clusterDir string
	client     kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// realCluster is the local cluster the suite runs on.
var realCluster *localcluster.Cluster

func run(m *testing.M) int {
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	kubectlBin = filepath.Join(repoRoot, "_output", "bin", "kubectl")
	down, err := upRealCluster()
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
	// Benchmarks measure the cluster: no log streams beside them.
	flag.Parse()
	if realCluster == nil || apiserverOnly || flag.Lookup("test.bench").Value.String() != "" {
		return m.Run()
	}
	stop, err := startArtifacts()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	stop(code != 0)
	return code
}

func upRealCluster() (func(), error) {
	if bin := os.Getenv("E2E_APISERVER_ONLY"); bin != "" {
		return upAPIServerOnly(bin)
	}
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
		// Down reads the cluster's record again: the CLI (the notebooks'
		// gpudra-cluster add-node) may have added nodes since.
		if err := realCluster.Down(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "cluster down: %v\n", err)
		}
	}, nil
}

// kubectl runs the cluster's kubectl with the admin kubeconfig.
func kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// clusterCmd runs an operation of test/localcluster on the running cluster,
// named like the gpudra-cluster command (e.g. restart-plugin gpu-h100):
// restart-plugin deletes the node's plugin pod and waits
// for the DaemonSet's new one; stop-plugin/start-plugin set and remove the
// node label that keeps the chart's plugin DaemonSets off the node;
// add-node joins a node to the running cluster (with plugin flags, under a
// node group of the chart of its own), remove-node takes it out;
// stop-controller/start-controller scale the controller Deployment;
// inject-fault and clear-faults edit the node's fault file.

// driverRoot is a node's simulated driver root (test/fakedriver), which its
// plugin sees at the chart's /driver-root.
func driverRoot(node string) string { return realCluster.Node(node).DriverRoot() }

func cdiDir(node string) string { return realCluster.Node(node).HostPath(localcluster.CDIDir) }

// kubeletDir is a node's kubelet root dir as the host sees it.
func kubeletDir(node string) string { return realCluster.Node(node).HostPath(localcluster.KubeletRoot) }

// checkpointDir holds this boot's checkpoint records of a node's plugin.
func checkpointDir(node string) string {
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		panic(err)
	}
	return filepath.Join(kubeletDir(node), "plugins", "gpu.gpudra.io", "checkpoint", strings.TrimSpace(string(bootID)))
}
