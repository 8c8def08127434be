//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/mpspod"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/test/localcluster"
	"github.com/gpudra/gpudra/test/nvmlsim"
	"github.com/gpudra/gpudra/test/sim"
)

// MPS control daemons run as a Pod per claim (internal/plugin/mpspod),
// outside the plugin's container: these tests show that the daemon an MPS
// client uses is the same process (same PID, same Pod, never restarted)
// across a plugin pod restart, a kill -9 of the plugin and a helm upgrade,
// that it is gone after unprepare and after a crash during unprepare, that
// clients share its /dev/shm, and that its GPU is in EXCLUSIVE_PROCESS
// compute mode while the claim holds it and DEFAULT after.

// mpsClaimOn applies an MPS claim with one client pod on node and returns
// the claim's UID and the daemon's host directory.
func mpsClaimOn(t *testing.T, ns, node string) (types.UID, string) {
	t.Helper()
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: mps-outside
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: %[1]s
    config:
    - requests: [gpu]
      opaque:
        driver: %[1]s
        parameters:
          apiVersion: resource.gpudra.io/v1alpha1
          kind: GpuClaimParameters
          sharing:
            strategy: MPS
            mps:
              defaultActiveThreadPercentage: 50
---
apiVersion: v1
kind: Pod
metadata:
  name: mps-client
spec:
  nodeSelector:
    kubernetes.io/hostname: %[2]s
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: mps-outside
`, driver, node))
	waitRunning(t, ns, "mps-client")
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), "mps-outside", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim.UID, filepath.Join(pluginDir(node), "mps", string(claim.UID))
}

// daemonState is what identifies a daemon: its Pod and its host PID.
type daemonState struct {
	podUID   types.UID
	restarts int32
	pid      int
}

func daemonNow(t *testing.T, node string, uid types.UID, dir string) daemonState {
	t.Helper()
	p := daemonPod(t, node, uid)
	if p == nil {
		t.Fatalf("no MPS control daemon Pod for claim %s", uid)
	}
	var restarts int32
	for _, cs := range p.Status.ContainerStatuses {
		restarts += cs.RestartCount
	}
	b, err := os.ReadFile(filepath.Join(dir, "pipe", sharing.ControlPIDFile))
	if err != nil {
		t.Fatalf("daemon PID: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !pidAlive(pid) {
		t.Fatalf("daemon PID %d of claim %s does not run", pid, uid)
	}
	return daemonState{podUID: p.UID, restarts: restarts, pid: pid}
}

// daemonPod is the claim's daemon Pod, nil if there is none.
func daemonPod(t *testing.T, node string, uid types.UID) *v1.Pod {
	t.Helper()
	plugin, err := realCluster.PluginPod(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.CoreV1().Pods(plugin.Namespace).Get(context.Background(), mpspod.Name(string(uid), 0), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// computeMode reads a simulated GPU's compute mode from the node's NVML
// state file.
func computeMode(t *testing.T, node, uuid string) nvml.ComputeMode {
	t.Helper()
	cfg, err := nvmlsim.LoadConfig(driverRoot(node))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sim.ReadState(cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st.GPUs {
		if g.UUID == uuid {
			return nvml.ComputeMode(g.ComputeMode)
		}
	}
	t.Fatalf("GPU %s not in the state of %s", uuid, node)
	return 0
}

func waitDaemonGone(t *testing.T, node string, uid types.UID, dir string, pid int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, dirErr := os.Stat(dir)
		return daemonPod(t, node, uid) == nil && os.IsNotExist(dirErr) && !pidAlive(pid), nil
	})
	if err != nil {
		t.Fatalf("MPS daemon of claim %s: Pod %v, directory %s, PID %d alive %v; want all gone",
			uid, daemonPod(t, node, uid) != nil, dir, pid, pidAlive(pid))
	}
}

// TestMPSDaemonSurvivesPlugin: plugin pod restart, kill -9, helm upgrade.
func TestMPSDaemonSurvivesPlugin(t *testing.T) {
	ns := namespace(t)
	const node = "gpu-h100"
	uid, dir := mpsClaimOn(t, ns, node)
	gpu := assertSeesAllocation(t, ns, "mps-client", "cuda")[0].uuid
	before := daemonNow(t, node, uid, dir)

	// The client's /dev/shm is the daemon's: both mount the claim's shm
	// directory.
	inj := injection(t, pod(t, ns, "mps-client"), "cuda")
	shm := filepath.Join(dir, "shm")
	if !slices.ContainsFunc(inj.Mounts, func(m hostMount) bool { return m.Destination == "/dev/shm" && m.Source == shm }) {
		t.Errorf("the client does not mount %s as /dev/shm; mounts: %+v", shm, inj.Mounts)
	}
	// The Pod names the node's path of the same directory.
	nodeShm := filepath.Join(localcluster.KubeletRoot, "plugins", driver, "mps", string(uid), "shm")
	dp := daemonPod(t, node, uid)
	if !slices.ContainsFunc(dp.Spec.Volumes, func(v v1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == nodeShm }) {
		t.Errorf("the daemon Pod does not mount %s; volumes: %+v", nodeShm, dp.Spec.Volumes)
	}
	if got := computeMode(t, node, gpu); got != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode of %s with an MPS claim: %d, want EXCLUSIVE_PROCESS", gpu, got)
	}

	same := func(what string) {
		t.Helper()
		// Give the restarted plugin time to check (and wrongly replace) it.
		time.Sleep(15 * time.Second)
		if after := daemonNow(t, node, uid, dir); after != before {
			t.Fatalf("after %s: daemon %+v, before %+v; want the same Pod and PID, never restarted", what, after, before)
		}
	}
	clusterCmd(t, "restart-plugin", node)
	same("a plugin pod restart")

	pids, err := realCluster.PluginPIDs(node)
	if err != nil || len(pids) != 1 {
		t.Fatalf("plugin processes of %s: %v %v, want one", node, pids, err)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	same("kill -9 of the plugin")

	if err := realCluster.InstallDriver(context.Background(), "kubeletPlugin.logVerbosity=5"); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	t.Cleanup(func() { _ = realCluster.InstallDriver(context.Background()) })
	same("a helm upgrade")

	deletePod(t, ns, "mps-client")
	waitDaemonGone(t, node, uid, dir, before.pid)
	if got := computeMode(t, node, gpu); got != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("compute mode of %s after unprepare: %d, want DEFAULT", gpu, got)
	}
}
