package plugin

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// The health taints are published in the driver's domain, and the base (whose
// lost taint comes from internal/plugin/slice) keeps internal/plugin/health's keys, so that the next
// ApplyTaints still recognises them.
func TestPublishedTaintKeys(t *testing.T) {
	lost := resourceapi.DeviceTaint{Key: health.KeyLost, Value: "gpu-is-lost", Effect: resourceapi.DeviceTaintEffectNoExecute}
	other := resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	base := func() resourceslice.DriverResources {
		return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node-a": {Slices: []resourceslice.Slice{
			{Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1", Taints: []resourceapi.DeviceTaint{lost, other}}}},
		}}}}
	}
	for _, tc := range []struct {
		driver, taints string
		want           []string
	}{
		{"gpu.gpudra.io", "", []string{"gpu.gpudra.io/lost", "example.com/maintenance"}},
		{"gpu.nvidia.com", "", []string{"gpu.nvidia.com/gpu-lost", "example.com/maintenance"}},
		{"gpu.nvidia.com", "gpudra", []string{"gpu.nvidia.com/lost", "example.com/maintenance"}},
	} {
		b := base()
		p := &publisher{base: b, names: compat.MustResolve(compat.Flags{Driver: tc.driver, HealthTaints: tc.taints})}
		got := publishedTaintKeys(p.names, p.desiredLocked())
		taints := got.Pools["node-a"].Slices[0].Devices[1].Taints
		if len(taints) != len(tc.want) {
			t.Fatalf("%s: taints %v, want keys %v", tc.driver, taints, tc.want)
		}
		for i, k := range tc.want {
			if taints[i].Key != k {
				t.Errorf("%s: taint %d has key %q, want %q", tc.driver, i, taints[i].Key, k)
			}
		}
		if k := p.Desired().Pools["node-a"].Slices[0].Devices[1].Taints[0].Key; k != tc.want[0] {
			t.Errorf("%s: the first publish would use taint key %q, want %q", tc.driver, k, tc.want[0])
		}
		if k := b.Pools["node-a"].Slices[0].Devices[1].Taints[0].Key; k != health.KeyLost {
			t.Errorf("%s: the base's taint key became %q", tc.driver, k)
		}
	}
}
