package health

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

func dev(name string, attrs map[string]string, taints ...resourceapi.DeviceTaint) resourceapi.Device {
	d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}, Taints: taints}
	for k, v := range attrs {
		d.Attributes[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{StringValue: &v}
	}
	return d
}

func TestApplyTaintsAndReport(t *testing.T) {
	since := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	snap := Snapshot{GPUs: map[string][]Condition{
		"GPU-a": {{Key: KeyXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute, Since: since, Message: "XID 79: GPU has fallen off the bus"}},
		"GPU-b": {{Key: KeyXID, Value: "74", Effect: resourceapi.DeviceTaintEffectNoSchedule, Since: since, Message: "XID 74: NVLink error"}},
	}}
	admin := resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	stale := resourceapi.DeviceTaint{Key: KeyLost, Value: "gpu-is-lost", Effect: resourceapi.DeviceTaintEffectNoExecute}
	devices := []resourceapi.Device{
		dev("gpu-0", map[string]string{"uuid": "GPU-a"}),
		dev("gpu-0-mig-1g.10gb-0", map[string]string{"uuid": "MIG-x", "parentUUID": "GPU-a"}),
		dev("gpu-1", map[string]string{"uuid": "GPU-b"}, admin),
		dev("gpu-2", map[string]string{"uuid": "GPU-c"}, stale),
	}
	out := snap.ApplyTaints(devices)
	for _, tc := range []struct {
		i    int
		keys []string
	}{
		{0, []string{KeyXID}},
		{1, []string{KeyXID}}, // the MIG device inherits its parent's taint
		{2, []string{"example.com/maintenance", KeyXID}},
		{3, nil}, // our stale taint is gone, the GPU is healthy
	} {
		var keys []string
		for _, taint := range out[tc.i].Taints {
			keys = append(keys, taint.Key)
		}
		assert.Equal(t, tc.keys, keys, out[tc.i].Name)
	}
	assert.Equal(t, "79", out[1].Taints[0].Value)
	assert.Equal(t, since, out[0].Taints[0].TimeAdded.Time)
	assert.Equal(t, []resourceapi.DeviceTaint{stale}, devices[3].Taints, "input untouched")

	now := since.Add(time.Minute)
	r := snap.Report(Refs("node-a", out), now, 0)
	assert.Equal(t, []kubeletplugin.DeviceHealth{
		{PoolName: "node-a", DeviceName: "gpu-0", Health: kubeletplugin.HealthStatusUnhealthy, LastUpdated: now, Message: "XID 79: GPU has fallen off the bus"},
		{PoolName: "node-a", DeviceName: "gpu-0-mig-1g.10gb-0", Health: kubeletplugin.HealthStatusUnhealthy, LastUpdated: now, Message: "XID 79: GPU has fallen off the bus"},
		{PoolName: "node-a", DeviceName: "gpu-1", Health: kubeletplugin.HealthStatusUnhealthy, LastUpdated: now, Message: "XID 74: NVLink error"},
		{PoolName: "node-a", DeviceName: "gpu-2", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now},
	}, r.Devices)
	assert.Equal(t, Unhealthy, snap.Health("GPU-a"))
	assert.Equal(t, Degraded, snap.Health("GPU-b"))
	assert.Equal(t, Healthy, snap.Health("GPU-c"))
}
