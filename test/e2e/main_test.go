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

func run(m *testing.M) int {
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	clusterSh = filepath.Join(repoRoot, "test", "cluster", "cluster.sh")
	kubectlBin = filepath.Join(repoRoot, "_output", "bin", "kubectl")
	clusterDir = os.Getenv("GPUDRA_CLUSTER_DIR")
	if clusterDir == "" {
		clusterDir = filepath.Join(repoRoot, "_output", "cluster")
	}
	if out, err := exec.Command(clusterSh, "up").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster up failed: %v\n%s\n", err, out)
		return 1
	}
	if os.Getenv("E2E_KEEP_CLUSTER") != "1" {
		defer func() {
			if out, err := exec.Command(clusterSh, "down").CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "cluster down failed: %v\n%s\n", err, out)
			}
		}()
	}
	out, err := exec.Command(clusterSh, "kubeconfig").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeconfig: %v\n", err)
		return 1
	}
	kubeconfig = strings.TrimSpace(string(out))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "load kubeconfig %s: %v\n", kubeconfig, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 100, 200
	client = kubernetes.NewForConfigOrDie(cfg)
	if out, err := kubectl("apply", "-f", filepath.Join(repoRoot, "deployments", "static")); err != nil {
		fmt.Fprintf(os.Stderr, "install DeviceClasses: %v\n%s\n", err, out)
		return 1
	}
	return m.Run()
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
func clusterCmd(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(clusterSh, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh %v: %v\n%s", args, err, out)
	}
}

// nodeDir is where a node's kubelet, plugin state and CDI specs live.
func nodeDir(node string) string { return filepath.Join(clusterDir, "nodes", node) }

// driverRoot is a node's simulated driver root (test/fakedriver), which its
// plugin sees at the chart's /driver-root.
func driverRoot(node string) string { return filepath.Join(nodeDir(node), "driver-root") }

func cdiDir(node string) string { return filepath.Join(nodeDir(node), "cdi") }

// checkpointDir holds this boot's checkpoint records of a node's plugin.
func checkpointDir(node string) string {
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		panic(err)
	}
	return filepath.Join(nodeDir(node), "kubelet", "plugins", "gpu.gpudra.io", "checkpoint", strings.TrimSpace(string(bootID)))
}
