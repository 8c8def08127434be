//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// An MPS claim on a dynamic MIG device.
const migMPSPod = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-mps}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.gpudra.io
          selectors:
          - cel:
              expression: device.attributes["gpu.gpudra.io"].profile == "1g.10gb"
      config:
      - requests: [mig]
        opaque:
          driver: gpu.gpudra.io
          parameters:
            apiVersion: resource.gpudra.io/v1alpha1
            kind: GpuClaimParameters
            sharing:
              strategy: MPS
              mps: {defaultActiveThreadPercentage: 50}
---
apiVersion: v1
kind: Pod
metadata: {name: mig-mps}
spec:
  nodeSelector: {kubernetes.io/hostname: gpu-h100}
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: mig}]}
  resourceClaims:
  - {name: mig, resourceClaimTemplateName: mig-mps}
`

var parentOfMIG = regexp.MustCompile(`^(gpu-\d+)-mig-`)

// TestHealthWithDynamicMIGAndMPS runs an MPS pod on a dynamically created
// MIG device with health monitoring on (the default), breaks the parent GPU
// (XID 79) and checks that the MIG device inherits the NoExecute taint, the
// pod sees it Unhealthy and is evicted, that the eviction's unprepare
// releases the claim and stops its MPS daemon although the GPU is lost, and
// that the GPU's reset removes the MIG device.
func TestHealthWithDynamicMIGAndMPS(t *testing.T) {
	ns := namespace(t)
	t.Cleanup(func() { clearFaults(t, migNode) })
	applyYAML(t, ns, migMPSPod)
	waitRunning(t, ns, "mig-mps")
	p := pod(t, ns, "mig-mps")
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device
	m := parentOfMIG.FindStringSubmatch(device)
	if m == nil {
		t.Fatalf("allocated %s, want a dynamic MIG device", device)
	}
	parent := m[1]
	rec := readRecord(t, migNode, string(claim.UID))
	migUUID := rec.Devices[0].UUID
	pipe := filepath.Join(pluginDir(migNode), "mps", string(claim.UID), "pipe")
	if d := mpsDaemons(t, pipe); rec.MPS == nil || len(d) != 1 {
		t.Fatalf("the claim's MPS daemon is not running: %+v, daemons %v", rec.MPS, d)
	}
	if devs := migDevicesInNVML(t, migNode); devs[migUUID] != "1g.10gb" {
		t.Fatalf("MIG device %s of the pod missing in NVML: %v", migUUID, devs)
	}
	checkMIGEnv(t, ns+"/mig-mps", rec.Devices[0].MIG, migUUID)
	t.Logf("pod runs on %s (parent %s, %s) with MPS daemon %d", device, parent, migUUID, rec.MPS.PID)

	sawUnhealthy := watchUnhealthy(t, ns, "mig-mps")
	clusterCmd(t, "inject-fault", migNode, parent, "xid", "79")
	waitTaints(t, migNode, device, func(ts []resourceapi.DeviceTaint) bool {
		return hasTaint(ts, "gpu.gpudra.io/xid", "79", resourceapi.DeviceTaintEffectNoExecute)
	})
	sawUnhealthy(time.Minute)

	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, "mig-mps", metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		t.Fatal("the pod on the broken GPU's MIG device was not evicted")
	}
	// The claim is unprepared although its GPU is lost: record and MPS
	// daemon go. Its MIG device cannot be destroyed through NVML while the
	// GPU has fallen off the bus (every query fails, as on a real GPU), and
	// the node's NVML view fails for that GPU; a GPU reset removes it.
	fileGone(t, filepath.Join(checkpointDir(migNode), string(claim.UID)+".json"))
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(mpsDaemons(t, pipe)) == 0, nil
	}); err != nil {
		t.Fatalf("MPS daemons %v still run after the claim was unprepared", mpsDaemons(t, pipe))
	}
	clearFaults(t, migNode)
	waitMIG(t, "the evicted pod's MIG device after the GPU reset", func(d map[string]string) bool { return d[migUUID] == "" })
}
