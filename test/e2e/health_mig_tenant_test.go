//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// migTenantPod is a Pod on a dynamic 1g.10gb MIG device of migNode whose
// claim also satisfies the extra CEL condition (true for any device).
func migTenantPod(name, cond string) string {
	return strings.NewReplacer("NAME", name, "COND", cond).Replace(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: NAME}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.gpudra.io
          selectors:
          - cel:
              expression: device.attributes["gpu.gpudra.io"].profile == "1g.10gb" && (COND)
---
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  nodeSelector: {kubernetes.io/hostname: ` + migNode + `}
  containers:
  - {name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: mig}]}}
  resourceClaims:
  - {name: mig, resourceClaimTemplateName: NAME}
`)
}

// TestHealthMIGTenantXID: two tenants on MIG devices of one GPU; an XID
// that NVML attributes to the first tenant's GPU instance (XID 94, a
// contained ECC error: no recovery action) taints only that tenant's MIG
// device, not its neighbour's, not the GPU; neither pod is evicted (the
// taint is NoSchedule). Before MIG-scoped XIDs were read, every MIG device
// of the GPU was tainted.
func TestHealthMIGTenantXID(t *testing.T) {
	ns := namespace(t)
	t.Cleanup(func() { clearFaults(t, migNode) })
	applyYAML(t, ns, migTenantPod("tenant-a", "true"))
	waitRunning(t, ns, "tenant-a")
	a := tenantDevice(t, ns, "tenant-a")
	applyYAML(t, ns, migTenantPod("tenant-b", fmt.Sprintf(`device.attributes["gpu.gpudra.io"].parentUUID == %q`, a.parentUUID)))
	waitRunning(t, ns, "tenant-b")
	b := tenantDevice(t, ns, "tenant-b")
	if b.name == a.name || b.parentUUID != a.parentUUID {
		t.Fatalf("want two MIG devices of one GPU, got %+v and %+v", a, b)
	}
	t.Logf("tenants on %s (GI %d) and %s (GI %d) of %s", a.name, a.giID, b.name, b.giID, a.parent)

	clusterCmd(t, "inject-fault", migNode, a.parent, "xid", "94", "gi", strconv.Itoa(a.giID))
	waitTaints(t, migNode, a.name, func(ts []resourceapi.DeviceTaint) bool {
		return hasTaint(ts, "gpu.gpudra.io/xid", "94", resourceapi.DeviceTaintEffectNoSchedule)
	})
	// The monitor publishes all devices of the node in one slice update, so
	// the neighbour's and the GPU's taints are read from the same state.
	for _, d := range sliceDeviceTaints(t, migNode) {
		if (d.Name == b.name || d.Name == a.parent) && len(d.Taints) > 0 {
			t.Errorf("%s is tainted by the other tenant's XID: %+v", d.Name, d.Taints)
		}
	}
	// NoSchedule: both tenants keep running.
	time.Sleep(5 * time.Second)
	for _, name := range []string{"tenant-a", "tenant-b"} {
		if p := pod(t, ns, name); p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning {
			t.Errorf("pod %s is %s (deleting: %v), want it running", name, p.Status.Phase, p.DeletionTimestamp != nil)
		}
	}
}

type migTenant struct {
	name, parent, parentUUID string
	giID                     int
}

// tenantDevice returns the MIG device a running pod's claim was prepared
// with (checkpoint record): its slice name, the parent's name and UUID, its
// GPU instance ID.
func tenantDevice(t *testing.T, ns, name string) migTenant {
	t.Helper()
	claim := podClaim(t, ns, name)
	rec := readRecord(t, migNode, string(claim.UID))
	if len(rec.Devices) != 1 || rec.Devices[0].MIG == nil {
		t.Fatalf("claim of %s: want one MIG device, record %+v", name, rec.Devices)
	}
	m := rec.Devices[0].MIG
	return migTenant{name: claim.Status.Allocation.Devices.Results[0].Device, parent: m.Parent, parentUUID: m.ParentUUID, giID: m.GIID}
}
