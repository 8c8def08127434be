package plugin

import (
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpudra/gpudra/internal/plugin/health"
)

func TestPublisherAppliesCurrentTaints(t *testing.T) {
	uuid := func(s string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: &s}}
	}
	base := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node-a": {Slices: []resourceslice.Slice{
		{Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: uuid("GPU-a")}, {Name: "gpu-1", Attributes: uuid("GPU-b")}}},
	}}}}
	snap := health.Snapshot{}
	p := &publisher{taints: func() health.Snapshot { return snap }}
	if err := p.SetBase(t.Context(), base); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		conds map[string][]health.Condition
		want  map[string]int // device -> number of taints
	}{
		{name: "healthy", want: map[string]int{"gpu-0": 0, "gpu-1": 0}},
		{name: "gpu-1 lost", conds: map[string][]health.Condition{"GPU-b": {{Key: health.KeyLost, Value: "gpu-is-lost",
			Effect: resourceapi.DeviceTaintEffectNoExecute, Since: time.Now()}}}, want: map[string]int{"gpu-0": 0, "gpu-1": 1}},
		{name: "repaired", want: map[string]int{"gpu-0": 0, "gpu-1": 0}},
	} {
		snap = health.Snapshot{GPUs: tc.conds}
		got := p.Devices()
		for name, n := range tc.want {
			if len(got[name].Taints) != n {
				t.Errorf("%s: %s has taints %v, want %d", tc.name, name, got[name].Taints, n)
			}
		}
	}
	if taints := base.Pools["node-a"].Slices[0].Devices[1].Taints; taints != nil {
		t.Errorf("the base was modified: %v", taints)
	}
	refs := p.Refs()
	if len(refs) != 2 || refs[1] != (health.DeviceRef{Pool: "node-a", Device: "gpu-1", GPU: "GPU-b"}) {
		t.Errorf("refs = %v", refs)
	}
}
