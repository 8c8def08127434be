//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/images"
	"github.com/gpudra/gpudra/test/localcluster"
)

// crioNode is the CRI-O node TestCRIO adds (runc through conmon, CDI from
// the directory the plugin writes); gpu-h100 is a containerd node.
const crioNode = "gpu-crio"

// TestCRIO: a node that runs CRI-O instead of containerd publishes its
// GPUs and runs a GPU pod: the claim's device node and the spec's
// GPUDRA_GPU_<minor> variable reach the container, and the real
// nvidia-cdi-hook runs under CRI-O (the driver's libcuda is in the ld
// cache). Pods without a claim see no GPU on either runtime, also with
// NVIDIA_VISIBLE_DEVICES=all set by the pod or by the image (as CUDA's
// base images do): neither runtime acts on the variable, only CDI injects
// devices.
func TestCRIO(t *testing.T) {
	t.Cleanup(func() { clusterCmd(t, "remove-node", crioNode) })
	clusterCmd(t, "add-node", crioNode+"=l4", "--runtime="+localcluster.RuntimeCRIO)
	waitSliceDevices(t, crioNode, 2)
	ns := namespace(t)

	t.Run("GPU pod", func(t *testing.T) {
		applyYAML(t, ns, strings.NewReplacer("NODE", crioNode, "WORKLOAD", images.WorkloadImage).Replace(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.gpudra.io}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu-on-crio}
spec:
  nodeSelector: {kubernetes.io/hostname: NODE}
  containers:
  - name: ctr
    image: WORKLOAD
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimName: one-gpu
`))
		waitRunning(t, ns, "gpu-on-crio")
		d := assertSeesAllocation(t, ns, "gpu-on-crio", "ctr")
		if len(d) != 1 || d[0].node != crioNode {
			t.Fatalf("allocated %+v, want one GPU of %s", d, crioNode)
		}
		minor, ok := strings.CutPrefix(d[0].name, "gpu-")
		if !ok {
			t.Fatalf("allocated device %q: want a whole GPU gpu-<minor>", d[0].name)
		}
		p := pod(t, ns, "gpu-on-crio")
		if got, _ := injection(t, p, "ctr").Getenv("GPUDRA_GPU_" + minor); got != d[0].uuid {
			t.Errorf("the container sees GPUDRA_GPU_%s=%q, want %s", minor, got, d[0].uuid)
		}
		if nodes := nvidiaDevNodes(t, ns, "gpu-on-crio"); !strings.Contains(" "+strings.Join(nodes, " ")+" ", " nvidia"+minor+" ") {
			t.Errorf("the container's /dev has %v, want nvidia%s", nodes, minor)
		}
		if cache := mustKubectl(t, "-n", ns, "exec", "gpu-on-crio", "--", "ldconfig", "-p"); !strings.Contains(cache, "libcuda.so.1 ") {
			t.Errorf("the container's ld cache lacks the driver's libcuda.so.1 (did nvidia-cdi-hook run under CRI-O?):\n%s", cache)
		}
		deletePod(t, ns, "gpu-on-crio")
	})

	// No claim: gpudra-gpus finds nothing, /dev has no NVIDIA node, no
	// driver library is in the ld cache, and the variable did reach the
	// container.
	for _, node := range []string{"gpu-h100", crioNode} {
		for _, tc := range []struct{ name, image, env string }{
			{"pod-env", images.WorkloadImage, "env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]"},
			{"image-env", images.AllGPUsWorkloadImage, ""},
		} {
			t.Run(node+"/"+tc.name, func(t *testing.T) {
				name := "no-gpu-" + tc.name
				manifest := fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  containers:
  - name: ctr
    image: %s
    command: ["sh", "-c", "gpudra-gpus -v; echo gpus-exit=$?; trap 'exit 0' TERM; sleep 2147483647 & wait"]
    %s
`, name, node, tc.image, tc.env)
				applyYAML(t, ns, manifest)
				waitRunning(t, ns, name)
				out := logsUntil(t, ns, name, "gpus-exit=")
				if !strings.Contains(out, "gpus-exit=1") || strings.Contains(out, "(UUID: ") {
					t.Errorf("gpudra-gpus in a pod without a claim on %s found GPUs:\n%s", node, out)
				}
				if got, _ := injection(t, pod(t, ns, name), "ctr").Getenv("NVIDIA_VISIBLE_DEVICES"); got != "all" {
					t.Errorf("NVIDIA_VISIBLE_DEVICES=%q in the container, want all (the case under test)", got)
				}
				if nodes := nvidiaDevNodes(t, ns, name); len(nodes) > 0 {
					t.Errorf("a pod without a claim on %s has /dev nodes %v", node, nodes)
				}
				cache := mustKubectl(t, "-n", ns, "exec", name, "--", "ldconfig", "-p")
				if strings.Contains(cache, "libcuda") || strings.Contains(cache, "libnvidia") {
					t.Errorf("a pod without a claim on %s has driver libraries in its ld cache:\n%s", node, cache)
				}
				deletePod(t, ns, name)
			})
		}
	}
}

var nvidiaDevNode = regexp.MustCompile(`^nvidia`)

// nvidiaDevNodes lists the NVIDIA entries of a running container's /dev.
func nvidiaDevNodes(t *testing.T, ns, name string) []string {
	t.Helper()
	var out []string
	for _, e := range strings.Fields(mustKubectl(t, "-n", ns, "exec", name, "--", "ls", "-1", "/dev")) {
		if nvidiaDevNode.MatchString(e) {
			out = append(out, e)
		}
	}
	return out
}

// logsUntil waits until the container's log contains marker.
func logsUntil(t *testing.T, ns, name, marker string) string {
	t.Helper()
	var out string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		out, err = kubectl("-n", ns, "logs", name)
		return err == nil && strings.Contains(out, marker), nil
	})
	if err != nil {
		t.Fatalf("logs of %s/%s never had %q: %v\n%s", ns, name, marker, err, out)
	}
	return out
}
