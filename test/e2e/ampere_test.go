//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// ampereNode runs test/localcluster/profiles/a100-r535.yaml: two A100s on
// driver R535, MIG enabled on gpu-0 only.
const ampereNode = "gpu-a100-r535"

// TestAmpereR535 adds a node of two A100s on a driver older than R550 with
// dynamic MIG on and checks what a user of such a node sees:
//   - the A100 whose administrator enabled MIG offers MIG devices only (its
//     mode needs a GPU reset to change, so the whole GPU is not offered), a
//     MIG claim runs on it and leaves MIG enabled;
//   - the A100 with MIG disabled is offered whole, without MIG devices;
//   - a double-bit ECC error taints a GPU NoExecute, and a GPU reset clears
//     it although the driver reports no recovery action.
func TestAmpereR535(t *testing.T) {
	t.Cleanup(func() { clusterCmd(t, "remove-node", ampereNode) })
	clusterCmd(t, "add-node", ampereNode+"="+filepath.Join(repoRoot, "test", "localcluster", "profiles", "a100-r535.yaml"), "--mig=dynamic")
	devs := waitSliceNames(t, ampereNode, func(names []string) bool { return len(names) > 1 })
	var whole, migOf0, migOf1 []string
	for _, n := range devs {
		switch {
		case strings.HasPrefix(n, "gpu-0-mig-"):
			migOf0 = append(migOf0, n)
		case strings.HasPrefix(n, "gpu-1-mig-"):
			migOf1 = append(migOf1, n)
		case strings.HasPrefix(n, "gpu-"):
			whole = append(whole, n)
		}
	}
	if strings.Join(whole, ",") != "gpu-1" || len(migOf0) == 0 || len(migOf1) != 0 {
		t.Fatalf("want gpu-1 whole and only gpu-0's MIG devices, got whole %v, gpu-0 MIG %v, gpu-1 MIG %v", whole, migOf0, migOf1)
	}

	t.Run("MIG claim on the MIG-enabled A100", func(t *testing.T) {
		ns := namespace(t)
		applyYAML(t, ns, strings.ReplaceAll(migTenantPod("on-ampere", "true"), migNode, ampereNode))
		waitRunning(t, ns, "on-ampere")
		rec := readRecord(t, ampereNode, string(podClaim(t, ns, "on-ampere").UID))
		if len(rec.Devices) != 1 || rec.Devices[0].MIG == nil || rec.Devices[0].MIG.Parent != "gpu-0" {
			t.Fatalf("want a MIG device of gpu-0, record %+v", rec.Devices)
		}
		deletePod(t, ns, "on-ampere")
		if !ampereMIGEnabled(t)["gpu-0"] {
			t.Fatal("MIG mode of gpu-0 was turned off after its claim (an A100 would need a reset to turn it on again)")
		}
	})

	t.Run("ECC fault cleared by a reset", func(t *testing.T) {
		t.Cleanup(func() { clearFaults(t, ampereNode) })
		clusterCmd(t, "inject-fault", ampereNode, "gpu-1", "ecc")
		waitTaints(t, ampereNode, "gpu-1", func(ts []resourceapi.DeviceTaint) bool {
			for _, tt := range ts {
				if tt.Key == "gpu.gpudra.io/ecc" && tt.Effect == resourceapi.DeviceTaintEffectNoExecute {
					return true
				}
			}
			return false
		})
		clearFaults(t, ampereNode)
		waitTaints(t, ampereNode, "gpu-1", func(ts []resourceapi.DeviceTaint) bool { return len(ts) == 0 })
	})
}

// waitSliceNames waits until the node's ResourceSlices of the driver list
// device names that ok accepts, and returns them.
func waitSliceNames(t *testing.T, node string, ok func([]string) bool) []string {
	t.Helper()
	var names []string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		names = names[:0]
		for _, d := range sliceDeviceTaints(t, node) {
			names = append(names, d.Name)
		}
		return ok(names), nil
	})
	if err != nil {
		t.Fatalf("node %s: devices in its ResourceSlices: %v", node, names)
	}
	return names
}

// podClaim is the pod's first ResourceClaim.
func podClaim(t *testing.T, ns, name string) *resourceapi.ResourceClaim {
	t.Helper()
	p := pod(t, ns, name)
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

// ampereMIGEnabled asks `gpu-kubelet-plugin inspect` on the node's driver
// root for the current MIG mode of each GPU, by device name (gpu-<minor>).
func ampereMIGEnabled(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "_output", "bin", "gpu-kubelet-plugin"), "inspect",
		"--nvidia-driver-root", driverRoot(ampereNode), "--node-name", ampereNode, "-o", "json").Output()
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var ins struct {
		Node struct {
			GPUs []struct {
				Minor      int  `json:"minor"`
				MIGEnabled bool `json:"migEnabled"`
			} `json:"gpus"`
		} `json:"node"`
	}
	if err := json.Unmarshal(out, &ins); err != nil {
		t.Fatalf("inspect output: %v", err)
	}
	modes := map[string]bool{}
	for _, g := range ins.Node.GPUs {
		modes[fmt.Sprintf("gpu-%d", g.Minor)] = g.MIGEnabled
	}
	return modes
}
