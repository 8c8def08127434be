//go:build e2e

package e2e

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// The behaviours of the NVIDIA compatibility mode that follow NVIDIA's driver
// at 9593204 (docs/nvidia-compatibility.md); each runs inside
// TestNVIDIACompatibility, with the chart in that mode.

// nvidiaMIGName is the form of NVIDIA's MIG device names.
var nvidiaMIGName = regexp.MustCompile(`^gpu-\d+-mig-[a-z0-9-]+-\d+-\d+$`)

// freeWholeGPU returns a whole GPU of the compatibility mode's slices.
func freeWholeGPU(t *testing.T) device {
	t.Helper()
	devices := sliceDevices(t)
	for _, k := range slices.Sorted(maps.Keys(devices)) {
		if d := devices[k]; !strings.Contains(d.name, "-mig-") && d.uuid != "" {
			return d
		}
	}
	t.Fatal("no whole GPU published under gpu.nvidia.com")
	return device{}
}

// compatMPSSettings: MPS settings as NVIDIA validates them — a per-device
// limit keyed by the GPU's UUID, defaultActiveThreadPercentage 0 (MPS's
// default stays) and multiUser false are accepted; multiUser true is
// refused by the webhook with what to do.
func compatMPSSettings(t *testing.T, ns string) {
	gpu := freeWholeGPU(t)
	applyYAML(t, ns, `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: mps-by-uuid}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {expression: "device.attributes['gpu.nvidia.com'].uuid == '`+gpu.uuid+`'"}
    config:
    - requests: ["gpu"]
      opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing:
            strategy: MPS
            mpsConfig:
              defaultActiveThreadPercentage: 0
              multiUser: false
              defaultPerDevicePinnedMemoryLimit:
                `+gpu.uuid+`: 2Gi
---
apiVersion: v1
kind: Pod
metadata: {name: mps-by-uuid}
spec:
  containers:
  - name: ctr
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimName: mps-by-uuid}
`)
	waitRunning(t, ns, "mps-by-uuid")
	inj := injection(t, pod(t, ns, "mps-by-uuid"), "ctr")
	if got := getenv(t, inj, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); got != "0=2048M" {
		t.Errorf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q, want 0=2048M (the limit keyed by %s)", got, gpu.uuid)
	}
	if v, ok := inj.Getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); ok {
		t.Errorf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q; a percentage of 0 must leave MPS's default", v)
	}
	deletePod(t, ns, "mps-by-uuid")

	out, err := kubectlApply(t, ns, `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: multi-user}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}
    config:
    - opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing: {strategy: MPS, mpsConfig: {multiUser: true}}
`)
	if err == nil || !strings.Contains(out, "multiUser") || !strings.Contains(out, "same user ID") {
		t.Errorf("multiUser: true: err %v, output %s; want the webhook to refuse it and say what to do", err, out)
	}
}

// compatTaints: an XID that makes gpudra evict (79) is published with
// NVIDIA's key and effect, gpu.nvidia.com/xid=79:NoSchedule, and nothing is
// NoExecute.
func compatTaints(t *testing.T) {
	gpu := freeWholeGPU(t)
	t.Cleanup(func() { clearFaults(t, gpu.node) })
	clusterCmd(t, "inject-fault", gpu.node, gpu.name, "xid", "79")
	taints := waitTaints(t, gpu.node, gpu.name, func(ts []resourceapi.DeviceTaint) bool {
		return hasTaint(ts, compat.NVIDIATaintXID, "79", resourceapi.DeviceTaintEffectNoSchedule)
	})
	for _, d := range sliceDeviceTaints(t, gpu.node) {
		for _, x := range d.Taints {
			if x.Effect == resourceapi.DeviceTaintEffectNoExecute || !strings.HasPrefix(x.Key, compat.NVIDIADriverName+"/") {
				t.Errorf("%s has taint %s=%s:%s; NVIDIA's schema has only gpu.nvidia.com/xid and gpu-lost, NoSchedule (all: %v)",
					d.Name, x.Key, x.Value, x.Effect, taints)
			}
		}
	}
}

// compatLeftoverCDISpec: a YAML claim spec that NVIDIA's driver left in the
// node's CDI directory is removed when the plugin starts.
func compatLeftoverCDISpec(t *testing.T) {
	gpu := freeWholeGPU(t)
	path := filepath.Join(cdiDir(gpu.node), "k8s.gpu.nvidia.com-claim_0b7c9a3e-5d1f-4c2a-9e8b-6f4d2c1a0e9f.yaml")
	spec := "cdiVersion: 0.6.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n- name: 0b7c9a3e-5d1f-4c2a-9e8b-6f4d2c1a0e9f-gpu-0\n" +
		"  containerEdits:\n    env: [LEFT_BY=nvidia]\n"
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	clusterCmd(t, "restart-plugin", gpu.node)
	fileGone(t, path)
}

// compatGpudraTaints: with kubeletPlugin.health.taints=gpudra the same XID
// gives gpudra's eviction taint in NVIDIA's domain. It reinstalls the chart;
// run it last.
func compatGpudraTaints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := realCluster.InstallDriver(ctx, "compatibility=nvidia", "kubeletPlugin.health.taints=gpudra"); err != nil {
		t.Fatalf("install with kubeletPlugin.health.taints=gpudra: %v", err)
	}
	gpu := freeWholeGPU(t)
	t.Cleanup(func() { clearFaults(t, gpu.node) })
	clusterCmd(t, "inject-fault", gpu.node, gpu.name, "xid", "79")
	waitTaints(t, gpu.node, gpu.name, func(ts []resourceapi.DeviceTaint) bool {
		return hasTaint(ts, compat.NVIDIADriverName+"/xid", "79", resourceapi.DeviceTaintEffectNoExecute)
	})
}

// compatAttributes: like NVIDIA's driver, no device carries the old
// pcieBusID attribute; every one carries the standard PCI bus ID.
func compatAttributes(t *testing.T) {
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.driver=" + compat.NVIDIADriverName})
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range list.Items {
		for _, d := range sl.Spec.Devices {
			if _, ok := d.Attributes["pcieBusID"]; ok {
				t.Errorf("%s/%s has pcieBusID", sl.Spec.Pool.Name, d.Name)
			}
			if d.Attributes["resource.kubernetes.io/pciBusID"].StringValue == nil {
				t.Errorf("%s/%s has no resource.kubernetes.io/pciBusID", sl.Spec.Pool.Name, d.Name)
			}
		}
	}
}
