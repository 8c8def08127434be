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

// A pod written for NVIDIA's device plugin asks for nvidia.com/mig-1g.10gb:
// the controller's per-profile class maps it, the scheduler allocates a
// 1g.10gb placement, the plugin creates it, and the container lists it like
// nvidia-smi -L, under its parent GPU and product.
func TestMIGExtendedResource(t *testing.T) {
	var class *resourceapi.DeviceClass
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		class, err = client.ResourceV1().DeviceClasses().Get(ctx, "1g.10gb.mig.gpudra.io", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the controller made no per-profile class 1g.10gb.mig.gpudra.io: %v", err)
	}
	if ern := class.Spec.ExtendedResourceName; ern == nil || *ern != "nvidia.com/mig-1g.10gb" {
		t.Fatalf("1g.10gb.mig.gpudra.io: extendedResourceName %v, want nvidia.com/mig-1g.10gb", ern)
	}
	ns := namespace(t)
	applySpec(t, ns, spec("17-mig-extended-resource.yaml"))
	waitRunning(t, ns, "legacy-mig-pod")
	p := pod(t, ns, "legacy-mig-pod")
	if p.Status.ExtendedResourceClaimStatus == nil {
		t.Fatal("the pod has no extended-resource claim: it was not served through DRA")
	}
	c, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), p.Status.ExtendedResourceClaimStatus.ResourceClaimName, metav1.GetOptions{})
	if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("extended-resource claim: %v %+v", err, c)
	}
	if dev := c.Status.Allocation.Devices.Results[0].Device; !strings.Contains(dev, "-mig-1g10gb-") {
		t.Fatalf("allocated %s, want a 1g.10gb MIG device", dev)
	}
	out := logsOf(t, ns, "legacy-mig-pod", "cuda")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "GPU 0: NVIDIA ") || strings.Contains(lines[0], "unknown") ||
		!strings.HasPrefix(lines[1], "  MIG 1g.10gb     Device  0: (UUID: MIG-") {
		t.Fatalf("the container should list its MIG device like nvidia-smi -L, got:\n%s", out)
	}
}

// logsOf waits for a container's gpudra-gpus output and returns it.
func logsOf(t *testing.T, ns, podName, container string) string {
	t.Helper()
	return waitLogs(t, ns, podName, container, gpusPrinted)
}

// Minimum memory, NVLink and ECC in one claim; ECC is a hard filter (the
// second L4 of gpu-mixed has it off).
func TestSelectECCNVLinkMemory(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("16-ecc-nvlink-memory.yaml"))
	waitRunning(t, ns, "ecc-nvlink-pair", "l4-with-ecc")
	pair := assertSeesAllocation(t, ns, "ecc-nvlink-pair", "cuda")
	if len(pair) != 2 || pair[0].nvlinkDomain == "" || pair[0].nvlinkDomain != pair[1].nvlinkDomain || pair[0].product == "NVIDIA L4" {
		t.Fatalf("want two NVLink-connected GPUs of at least 40Gi, got %+v", pair)
	}
	l4 := assertSeesAllocation(t, ns, "l4-with-ecc", "cuda")
	if len(l4) != 1 || l4[0].node != "gpu-mixed" || l4[0].name != "gpu-0" {
		t.Fatalf("the only L4 with ECC is gpu-mixed/gpu-0, got %+v", l4)
	}
	for _, name := range []string{"gpu-0", "gpu-1"} {
		ecc := sliceAttr(t, "gpu-mixed", name, "eccEnabled")
		if ecc == nil || ecc.BoolValue == nil || *ecc.BoolValue != (name == "gpu-0") {
			t.Errorf("gpu-mixed/%s eccEnabled %+v, the profile says %v", name, ecc, name == "gpu-0")
		}
	}
	// A second pod that needs an L4 with ECC finds none, although gpu-1 is free.
	applyYAML(t, ns, strings.ReplaceAll(`apiVersion: v1
kind: Pod
metadata: {name: second-l4-with-ecc, namespace: NS}
spec:
  containers: [{name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: l4-with-ecc}]
`, "NS", ns))
	// gpu-1 has ECC off.
	waitUnschedulable(t, ns, "second-l4-with-ecc")
}

func sliceAttr(t *testing.T, node, device string, attr resourceapi.QualifiedName) *resourceapi.DeviceAttribute {
	t.Helper()
	slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices.Items {
		if s.Spec.Driver != driver || s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				if a, ok := d.Attributes[attr]; ok {
					return &a
				}
			}
		}
	}
	return nil
}
