//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/sim"
)

// TestComputeModeRestored: a GPU an operator put in PROHIBITED compute mode
// is switched to EXCLUSIVE_PROCESS for an MPS claim and gets PROHIBITED back
// when the claim goes (NVIDIA's driver would leave it in DEFAULT). The mode
// is set through the node's simulated NVML while its plugin is stopped, as
// an operator's `nvidia-smi -c` before the plugin starts.
func TestComputeModeRestored(t *testing.T) {
	const node = "gpu-h100"
	setComputeModes(t, node, nvml.COMPUTEMODE_PROHIBITED)
	t.Cleanup(func() { setComputeModes(t, node, nvml.COMPUTEMODE_DEFAULT) })

	ns := namespace(t)
	uid, dir := mpsClaimOn(t, ns, node)
	gpu := assertSeesAllocation(t, ns, "mps-client", "cuda")[0].uuid
	if got := computeMode(t, node, gpu); got != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode of %s with an MPS claim: %d, want EXCLUSIVE_PROCESS (%d)", gpu, got, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
	}
	pid := daemonNow(t, node, uid, dir).pid
	deletePod(t, ns, "mps-client")
	waitDaemonGone(t, node, uid, dir, pid)
	var got nvml.ComputeMode
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = computeMode(t, node, gpu)
		return got == nvml.COMPUTEMODE_PROHIBITED, nil
	})
	if err != nil {
		t.Errorf("compute mode of %s after the claim: %d, want the operator's PROHIBITED (%d) back", gpu, got, nvml.COMPUTEMODE_PROHIBITED)
	}
}

// setComputeModes sets every GPU of node (a dgx-h100) to mode through its
// simulated NVML's state file, with the node's plugin stopped so that the
// restarted plugin starts from it. GPUs in MIG mode keep theirs (NVML
// refuses the call there).
func setComputeModes(t *testing.T, node string, mode nvml.ComputeMode) {
	t.Helper()
	clusterCmd(t, "stop-plugin", node)
	defer clusterCmd(t, "start-plugin", node)
	p, err := sim.Load("dgx-h100", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := sim.NewServer(p, node)
	if err := s.PersistTo(simState(node)); err != nil {
		t.Fatal(err)
	}
	if ret := s.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init simulated NVML: %v", ret)
	}
	defer func() { _ = s.Shutdown() }()
	n, _ := s.DeviceGetCount()
	for i := range n {
		dev, _ := s.DeviceGetHandleByIndex(i)
		if current, _, _ := dev.GetMigMode(); current == nvml.DEVICE_MIG_ENABLE {
			continue
		}
		if ret := dev.SetComputeMode(mode); ret != nvml.SUCCESS {
			t.Fatalf("set compute mode %d on GPU %d of %s: %v", mode, i, node, ret)
		}
	}
}
