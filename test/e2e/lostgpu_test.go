//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestLostGPUThenPluginRestart: a GPU falls off the bus (XID 79: every NVML
// query on it fails from then on), then the node's plugin restarts (OOM,
// upgrade, drain). The plugin must come back and serve the node's other
// GPUs: the lost GPU published from its last known identity with a
// NoExecute taint, a new pod running on a healthy GPU. Before issue 13 the
// restarted plugin stopped at discovery ("NVML get memory info:
// ERROR_GPU_IS_LOST") and no claim on the node could be prepared. After the
// GPU's reset and another restart it is healthy again.
func TestLostGPUThenPluginRestart(t *testing.T) {
	const node = "gpu-h100"
	ns := namespace(t)
	podWithClaim(t, ns, "before-loss")
	lost := allocatedDevices(t, pod(t, ns, "before-loss"))[0].name
	t.Cleanup(func() {
		clusterCmd(t, "clear-faults", node)
		clusterCmd(t, "restart-plugin", node)
	})
	clusterCmd(t, "inject-fault", node, lost, "xid", "79")
	waitTaints(t, node, lost, noExecute)

	clusterCmd(t, "restart-plugin", node) // waits until it serves its sockets and is registered
	taints := waitTaints(t, node, lost, func(ts []resourceapi.DeviceTaint) bool {
		for _, x := range ts {
			if x.Key == "gpu.gpudra.io/lost" && x.Effect == resourceapi.DeviceTaintEffectNoExecute {
				return true
			}
		}
		return false
	})
	t.Logf("after the restart the lost %s is published tainted %v", lost, taints)
	for _, d := range sliceDeviceTaints(t, node) {
		if d.Name != lost && !strings.HasPrefix(d.Name, lost+"-mig-") && len(d.Taints) > 0 {
			t.Errorf("healthy device %s is tainted: %v", d.Name, d.Taints)
		}
	}
	podWithClaim(t, ns, "after-loss") // prepared by the restarted plugin
	if got := allocatedDevices(t, pod(t, ns, "after-loss"))[0].name; got == lost {
		t.Fatalf("the new pod got the lost GPU %s", got)
	}

	clusterCmd(t, "clear-faults", node)
	clusterCmd(t, "restart-plugin", node)
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, d := range sliceDeviceTaints(t, node) {
			if d.Name == lost {
				return len(d.Taints) == 0, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%s still tainted after its reset and a plugin restart", lost)
	}
	deletePod(t, ns, "after-loss")
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), "before-loss", metav1.DeleteOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
}

func noExecute(ts []resourceapi.DeviceTaint) bool {
	for _, x := range ts {
		if x.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return true
		}
	}
	return false
}
