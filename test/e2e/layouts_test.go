//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// TestDriverLayouts: a node with the GPU Operator's driver installation
// (/run/nvidia/driver, a distribution's root whose library directory also
// holds the host's own, here foreign, C library) and one with GKE's
// (/home/kubernetes/bin/nvidia: lib64, bin), each installed with the chart
// value the README gives for it (nvidiaDriverRoot, here per node group),
// publish their GPUs and run GPU pods: the real nvidia-cdi-hook indexes the
// layout's driver libraries in the container, and a time-sliced claim is
// prepared through the layout's nvidia-smi, started with only libnvidia-ml
// preloaded. (The host layout is the cluster's other nodes.)
func TestDriverLayouts(t *testing.T) {
	for _, layout := range []string{"operator", "gke"} {
		t.Run(layout, func(t *testing.T) {
			node := "gpu-" + layout
			t.Cleanup(func() { clusterCmd(t, "remove-node", node) })
			clusterCmd(t, "add-node", node+"=l4", "--layout="+layout)
			waitSliceDevices(t, node, 2)

			ns := namespace(t)
			applyYAML(t, ns, strings.ReplaceAll(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: sliced}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.gpudra.io}
    config:
    - requests: [gpu]
      opaque:
        driver: gpu.gpudra.io
        parameters:
          apiVersion: resource.gpudra.io/v1alpha1
          kind: GpuClaimParameters
          sharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}
---
apiVersion: v1
kind: Pod
metadata: {name: on-layout}
spec:
  nodeSelector: {kubernetes.io/hostname: NODE}
  containers:
  - name: ctr
    image: registry.local/gpudra/workload:local
    command: ["bash", "-c", "`+ldcacheScript+`"]
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimName: sliced
`, "NODE", node))
			waitRunning(t, ns, "on-layout")
			cache := ldcache(t, ns, "on-layout")
			// nvcdi mounts a library at its path under the driver root: GKE's
			// lib64/ becomes the container's /lib64.
			if !strings.Contains(cache, "libcuda.so.1 (libc6,x86-64) => ") {
				t.Errorf("the container's ld cache lacks the driver's libcuda.so.1:\n%s", cache)
			}
			d := allocatedDevices(t, pod(t, ns, "on-layout"))
			if len(d) != 1 || d[0].node != node {
				t.Fatalf("allocated %+v, want one GPU of %s", d, node)
			}
			// Long is level 3 of nvidia-smi compute-policy --set-timeslice.
			waitTimeSlice(t, node, d[0].uuid, "3")
			deletePod(t, ns, "on-layout")
		})
	}
}
