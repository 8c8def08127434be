package slice_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// shareNode publishes a simulated node's GPUs as consumable memory shares,
// exactly as the plugin does with --gpu-sharing=consumable.
func shareNode(t *testing.T, profile, node string) []*resourceapi.ResourceSlice {
	t.Helper()
	res, err := slice.Resources(node, simNode(t, profile, node), slice.Options{ConsumableMemory: true})
	require.NoError(t, err)
	var out []*resourceapi.ResourceSlice
	for _, s := range slice.Objects(driverName, node, res) {
		out = append(out, &s)
	}
	return out
}

func memoryClaim(name, memory, selector string) *resourceapi.ResourceClaim {
	c := gpuClaim(name, request{count: 1, selector: selector})
	if memory != "" {
		c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
			Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	}
	return c
}

// cluster state the scheduler keeps between claims.
type shareState struct {
	allocated sets.Set[structured.DeviceID]
	shared    sets.Set[structured.SharedDeviceID]
	consumed  structured.ConsumedCapacityCollection
}

// allocateShare runs the scheduler's allocator for one claim and, on
// success, records the allocation as the scheduler does.
func (s *shareState) allocateShare(t *testing.T, slices []*resourceapi.ResourceSlice, node string, claim *resourceapi.ResourceClaim) *resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	ctx := context.Background()
	a, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true},
		structured.AllocatedState{AllocatedDevices: s.allocated, AllocatedSharedDeviceIDs: s.shared, AggregatedCapacity: s.consumed},
		classes, slices, cel.NewCache(10, cel.Features{}))
	require.NoError(t, err)
	results, err := a.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, []*resourceapi.ResourceClaim{claim})
	require.NoError(t, err)
	if len(results) == 0 {
		return nil
	}
	r := results[0].Devices.Results[0]
	id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
	require.NotNil(t, r.ShareID, "a device with allowMultipleAllocations is allocated as a share")
	s.shared.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
	s.consumed.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
	return &r
}

// TestConsumableSharesFitAsMemoryAllows runs the scheduler's own allocator
// over the slices a consumable-share node publishes and checks that claims
// land on one GPU exactly as long as its memory lasts.
func TestConsumableSharesFitAsMemoryAllows(t *testing.T) {
	const gpu0 = `device.attributes["gpu.gpudra.io"].index == 0`
	tests := []struct {
		name, profile, memory, selector string
		wantFit                         int
		wantConsumed                    string
	}{
		{name: "20Gi shares of one 80Gi H100", profile: "dgx-h100", memory: "20Gi", selector: gpu0, wantFit: 4, wantConsumed: "20Gi"},
		{name: "30Gi shares of one 80Gi H100", profile: "dgx-h100", memory: "30Gi", selector: gpu0, wantFit: 2, wantConsumed: "30Gi"},
		{name: "1Gi shares of one 80Gi H100", profile: "dgx-h100", memory: "1Gi", selector: gpu0, wantFit: 80, wantConsumed: "1Gi"},
		{name: "requests round up to whole GiB", profile: "dgx-h100", memory: "19500Mi", selector: gpu0, wantFit: 4, wantConsumed: "20Gi"},
		{name: "no request takes the whole GPU", profile: "dgx-h100", selector: gpu0, wantFit: 1, wantConsumed: "80Gi"},
		{name: "more than the GPU never fits", profile: "dgx-h100", memory: "81Gi", selector: gpu0, wantFit: 0},
		{name: "20Gi shares fill all 8 GPUs of the node", profile: "dgx-h100", memory: "20Gi", wantFit: 32, wantConsumed: "20Gi"},
		{name: "10Gi shares of a 40Gi A100 node", profile: "dgx-a100", memory: "10Gi", wantFit: 32, wantConsumed: "10Gi"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slices := shareNode(t, tc.profile, "gpu-share")
			s := &shareState{allocated: sets.New[structured.DeviceID](), shared: sets.New[structured.SharedDeviceID](),
				consumed: structured.NewConsumedCapacityCollection()}
			perDevice := map[string]int{}
			fit := 0
			for ; fit <= tc.wantFit; fit++ {
				r := s.allocateShare(t, slices, "gpu-share", memoryClaim(fmt.Sprintf("c%d", fit), tc.memory, tc.selector))
				if r == nil {
					break
				}
				got := r.ConsumedCapacity["memory"]
				want := resource.MustParse(tc.wantConsumed)
				require.Zero(t, want.Cmp(got), "consumed %s, want %s", got.String(), tc.wantConsumed)
				perDevice[r.Device]++
			}
			require.Equal(t, tc.wantFit, fit, "claims that fit (per device: %v)", perDevice)
		})
	}
}

func typed(t string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{slice.AttrType: {StringValue: &t}}
}

func TestWithConsumableMemory(t *testing.T) {
	mem := func(q string) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
		return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{slice.CapacityMemory: {Value: resource.MustParse(q)}}
	}
	devs := []resourceapi.Device{
		{Name: "gpu-0", Attributes: typed(slice.DeviceTypeGPU), Capacity: mem("23034Mi")},
		// Left alone: a MIG device, and a whole GPU on dynamic-MIG counters.
		{Name: "gpu-1-mig-1g10gb-0", Attributes: typed(slice.DeviceTypeMIG), Capacity: mem("10Gi")},
		{Name: "gpu-2", Attributes: typed(slice.DeviceTypeGPU), Capacity: mem("80Gi"),
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-2"}}},
	}
	require.NoError(t, slice.WithConsumableMemory(devs))
	for _, d := range devs[1:] {
		require.Nil(t, d.AllowMultipleAllocations, d.Name)
		require.Nil(t, d.Capacity[slice.CapacityMemory].RequestPolicy, d.Name)
	}
	p := devs[0].Capacity[slice.CapacityMemory].RequestPolicy
	require.NotNil(t, devs[0].AllowMultipleAllocations)
	require.True(t, *devs[0].AllowMultipleAllocations)
	require.Equal(t, "22Gi", p.Default.String(), "the default is the memory rounded down to whole GiB")
	require.Equal(t, "22Gi", p.ValidRange.Max.String())
	require.Equal(t, "1Gi", p.ValidRange.Min.String())

	tiny := []resourceapi.Device{{Name: "gpu-0", Attributes: typed(slice.DeviceTypeGPU), Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		slice.CapacityMemory: {Value: resource.MustParse("512Mi")}}}}
	require.ErrorContains(t, slice.WithConsumableMemory(tiny), "less than one share of 1Gi")
	// A unified-memory GPU (no memory capacity) is not shared: it stays exclusive.
	unified := []resourceapi.Device{{Name: "gpu-1", Attributes: typed(slice.DeviceTypeGPU)}}
	require.NoError(t, slice.WithConsumableMemory(unified))
	require.Nil(t, unified[0].AllowMultipleAllocations)
}
