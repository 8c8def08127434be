package status

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

const driver = "gpu.gpudra.io"

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

func gpu(name, model string, taints ...resourceapi.DeviceTaint) resourceapi.Device {
	return resourceapi.Device{Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type": str("gpu"), "productName": str(model), "uuid": str("GPU-" + name)},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		Taints:   taints,
	}
}

func slice(node, drv string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + drv},
		Spec: resourceapi.ResourceSliceSpec{Driver: drv, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node}, Devices: devices}}
}

func claim(ns, name, node, device string, pods ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driver, Pool: node, Device: device}}}}}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: "u"})
	}
	return c
}

func TestStatus(t *testing.T) {
	client := fake.NewClientset(
		slice("node-b", driver, gpu("gpu-10", "NVIDIA L4"), gpu("gpu-2", "NVIDIA L4",
			resourceapi.DeviceTaint{Key: "gpu.gpudra.io/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute})),
		slice("node-a", driver, gpu("gpu-0", "NVIDIA H100 80GB HBM3",
			resourceapi.DeviceTaint{Key: "gpu.gpudra.io/ecc", Effect: resourceapi.DeviceTaintEffectNoSchedule})),
		slice("node-a", "other.example.com", gpu("nic-0", "NIC")),
		claim("ml", "train", "node-a", "gpu-0", "trainer-0"),
		claim("ml", "pending", "node-b", "gpu-10"),
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "unallocated"}},
	)
	devices, err := Collect(context.Background(), client, driver, "")
	require.NoError(t, err)
	require.Len(t, devices, 3, "only our driver's devices")
	require.Equal(t, []string{"node-a/gpu-0", "node-b/gpu-2", "node-b/gpu-10"},
		[]string{devices[0].Node + "/" + devices[0].Name, devices[1].Node + "/" + devices[1].Name, devices[2].Node + "/" + devices[2].Name})
	require.Equal(t, Degraded, devices[0].Health)
	require.Equal(t, Unhealthy, devices[1].Health)
	require.Equal(t, []string{"gpu.gpudra.io/xid=79:NoExecute"}, devices[1].Taints)
	require.Equal(t, Healthy, devices[2].Health)
	require.Equal(t, []Holder{{Namespace: "ml", Claim: "train", Pods: []string{"trainer-0"}, Request: "gpu"}}, devices[0].Holders)
	require.Equal(t, "80Gi", devices[0].Memory)

	var buf bytes.Buffer
	require.NoError(t, Print(&buf, devices, "table"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4)
	require.Regexp(t, `^NODE\s+DEVICE\s+TYPE\s+MODEL`, lines[0])
	require.Regexp(t, `node-a\s+gpu-0\s+gpu\s+NVIDIA H100 80GB HBM3\s+80Gi\s+-\s+-\s+Degraded\s+gpu.gpudra.io/ecc:NoSchedule\s+ml/trainer-0\s+ml/train`, lines[1])
	require.Regexp(t, `node-b\s+gpu-10\s+.*Healthy\s+-\s+-\s+ml/pending`, lines[3])

	buf.Reset()
	require.NoError(t, Print(&buf, devices, "json"))
	var back []Device
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Equal(t, devices, back)
	require.ErrorContains(t, Print(&buf, devices, "xml"), "unknown output format")

	only, err := Collect(context.Background(), client, driver, "node-b")
	require.NoError(t, err)
	require.Len(t, only, 2)
	buf.Reset()
	require.NoError(t, Print(&buf, nil, "json"))
	require.Equal(t, "[]\n", buf.String())
}

func TestInUseHidesIdlePlacements(t *testing.T) {
	placement := func(name string) resourceapi.Device {
		d := gpu(name, "NVIDIA H100 80GB HBM3")
		d.Attributes["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To("mig")}
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-mig"}}
		return d
	}
	static := gpu("gpu-1-mig-1g10gb-0", "NVIDIA H100 80GB HBM3")
	static.Attributes["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To("mig")}
	devices := Build([]resourceapi.ResourceSlice{*slice("node-a", driver, gpu("gpu-0", "NVIDIA H100 80GB HBM3"),
		placement("gpu-0-mig-1g10gb-0"), placement("gpu-0-mig-1g10gb-1"), static)},
		[]resourceapi.ResourceClaim{*claim("ml", "small", "node-a", "gpu-0-mig-1g10gb-1", "infer-0")}, driver, "")
	require.Len(t, devices, 4)
	var names []string
	for _, d := range InUse(devices) {
		names = append(names, d.Name)
	}
	require.Equal(t, []string{"gpu-0", "gpu-0-mig-1g10gb-1", "gpu-1-mig-1g10gb-0"}, names,
		"idle dynamic placements are hidden; held ones, GPUs and static MIG devices stay")
	require.Len(t, devices, 4, "InUse does not modify its input")
}
