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

// h100x1 is the local cluster's one-GPU node profile: a single-GPU slice.
const h100x1 = "../../../test/localcluster/profiles/h100x1.yaml"

// shareNode publishes a simulated node's devices as consumable shares,
// exactly as the plugin does with --consumable-shares=mode.
func shareNode(t *testing.T, profile, node, mode string) []*resourceapi.ResourceSlice {
	t.Helper()
	shares, err := slice.ParseConsumableShares(mode)
	require.NoError(t, err)
	res, err := slice.Resources(node, simNode(t, profile, node), slice.Options{ConsumableShares: shares})
	require.NoError(t, err)
	var out []*resourceapi.ResourceSlice
	for _, s := range slice.Objects(driverName, node, res) {
		out = append(out, &s)
	}
	return out
}

// shareClaim asks for one GPU (matching selector, if any) with the given
// capacity requests ("memory", "shares"; "" leaves one out).
func shareClaim(name, memory, shares, selector string) *resourceapi.ResourceClaim {
	c := gpuClaim(name, request{count: 1, selector: selector})
	reqs := map[resourceapi.QualifiedName]resource.Quantity{}
	if memory != "" {
		reqs[slice.CapacityMemory] = resource.MustParse(memory)
	}
	if shares != "" {
		reqs[slice.CapacityShares] = resource.MustParse(shares)
	}
	if len(reqs) > 0 {
		c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: reqs}
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

// TestConsumableSharesAllocation runs the scheduler's own allocator over the
// slices a consumable-share node publishes in each --consumable-shares mode
// and checks how many claims land on the GPUs and what each consumes.
func TestConsumableSharesAllocation(t *testing.T) {
	const gpu0 = `device.attributes["gpu.gpudra.io"].index == 0`
	tests := []struct {
		name, mode, profile, memory, shares, selector string
		// wantFit claims fit; the next one stays unallocated (-1: at least
		// 100 fit).
		wantFit                int
		wantMemory, wantShares string
	}{
		{name: "memory: 4Gi shares of one GPU", mode: "memory", profile: h100x1, memory: "4Gi", wantFit: 20, wantMemory: "4Gi"},
		{name: "memory: 20Gi shares of one 80Gi H100", mode: "memory", profile: h100x1, memory: "20Gi", wantFit: 4, wantMemory: "20Gi"},
		{name: "memory: 41Gi shares: a second does not fit", mode: "memory", profile: h100x1, memory: "41Gi", wantFit: 1, wantMemory: "41Gi"},
		{name: "memory: requests round up to whole MiB", mode: "memory", profile: h100x1, memory: "21474836479", wantFit: 4, wantMemory: "20Gi"},
		{name: "memory: no request takes the whole GPU", mode: "memory", profile: h100x1, wantFit: 1, wantMemory: "80Gi"},
		{name: "memory: more than the GPU never fits", mode: "memory", profile: h100x1, memory: "81Gi", wantFit: 0},
		{name: "memory: 20Gi shares fill all 8 GPUs of the node", mode: "memory", profile: "dgx-h100", memory: "20Gi", wantFit: 32, wantMemory: "20Gi"},
		{name: "unlimited: claims without a request all share one GPU", mode: "unlimited", profile: h100x1, wantFit: -1, wantMemory: "0"},
		{name: "unlimited: memory requests still add up", mode: "unlimited", profile: h100x1, memory: "41Gi", wantFit: 1, wantMemory: "41Gi"},
		{name: "4 shares: four claims fit one GPU", mode: "4", profile: h100x1, wantFit: 4, wantMemory: "0", wantShares: "1"},
		{name: "4 shares: a claim may take two", mode: "4", profile: h100x1, shares: "2", wantFit: 2, wantMemory: "0", wantShares: "2"},
		{name: "4 shares: and memory", mode: "4", profile: h100x1, memory: "30Gi", wantFit: 2, wantMemory: "30Gi", wantShares: "1"},
		{name: "4 shares on a node of 8 GPUs", mode: "4", profile: "dgx-h100", selector: gpu0, wantFit: 4, wantMemory: "0", wantShares: "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slices := shareNode(t, tc.profile, "gpu-share", tc.mode)
			s := &shareState{allocated: sets.New[structured.DeviceID](), shared: sets.New[structured.SharedDeviceID](),
				consumed: structured.NewConsumedCapacityCollection()}
			limit := tc.wantFit
			if limit < 0 {
				limit = 100
			}
			perDevice := map[string]int{}
			fit := 0
			for ; fit <= limit; fit++ {
				r := s.allocateShare(t, slices, "gpu-share", shareClaim(fmt.Sprintf("c%d", fit), tc.memory, tc.shares, tc.selector))
				if r == nil {
					break
				}
				requireConsumed(t, r, slice.CapacityMemory, tc.wantMemory)
				requireConsumed(t, r, slice.CapacityShares, tc.wantShares)
				perDevice[r.Device]++
			}
			if tc.wantFit < 0 {
				require.Greater(t, fit, limit, "claims that fit (per device: %v)", perDevice)
				require.Len(t, perDevice, 1, "all on one GPU")
				return
			}
			require.Equal(t, tc.wantFit, fit, "claims that fit (per device: %v)", perDevice)
		})
	}
}

// requireConsumed checks the consumed capacity name of an allocation; want
// "" means none recorded.
func requireConsumed(t *testing.T, r *resourceapi.DeviceRequestAllocationResult, name resourceapi.QualifiedName, want string) {
	t.Helper()
	got, ok := r.ConsumedCapacity[name]
	if want == "" {
		require.False(t, ok, "consumed %s: %s", name, got.String())
		return
	}
	require.True(t, ok, "no consumed %s", name)
	wantQ := resource.MustParse(want)
	require.Zero(t, wantQ.Cmp(got), "consumed %s %s, want %s", name, got.String(), want)
}

func typed(t string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{slice.AttrType: {StringValue: &t}}
}

func TestParseConsumableShares(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    slice.ConsumableShares
		wantErr bool
	}{
		{in: ""}, {in: "disabled"}, {in: " disabled "},
		{in: "memory", want: slice.ConsumableShares{Mode: slice.SharesMemory}},
		{in: "unlimited", want: slice.ConsumableShares{Mode: slice.SharesUnlimited}},
		{in: "4", want: slice.ConsumableShares{Mode: slice.SharesUnlimited, Count: 4}},
		{in: "0", wantErr: true}, {in: "-2", wantErr: true}, {in: "Memory", wantErr: true},
		{in: "consumable", wantErr: true}, {in: "1.5", wantErr: true},
	} {
		got, err := slice.ParseConsumableShares(tc.in)
		if tc.wantErr {
			require.ErrorContains(t, err, `must be "disabled", "memory", "unlimited" or a positive integer`, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		again, err := slice.ParseConsumableShares(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again, "String parses back")
	}
}

func TestWithConsumableShares(t *testing.T) {
	mem := func(q string) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
		return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{slice.CapacityMemory: {Value: resource.MustParse(q)}}
	}
	// policy is default/min/max/step of a capacity, "" when it has none.
	policy := func(c resourceapi.DeviceCapacity) string {
		p := c.RequestPolicy
		if p == nil {
			return ""
		}
		return fmt.Sprintf("%s/%s/%s/%s", p.Default, p.ValidRange.Min, p.ValidRange.Max, p.ValidRange.Step)
	}
	tests := []struct {
		mode                               string
		wantMemory, wantPolicy, wantShares string
	}{
		{mode: "memory", wantMemory: "23034Mi", wantPolicy: "23034Mi/1Mi/23034Mi/1Mi"},
		{mode: "unlimited", wantMemory: "23034Mi", wantPolicy: "0/0/23034Mi/1Mi"},
		{mode: "3", wantMemory: "23034Mi", wantPolicy: "0/0/23034Mi/1Mi", wantShares: "3: 1/1/3/1"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			shares, err := slice.ParseConsumableShares(tc.mode)
			require.NoError(t, err)
			devs := []resourceapi.Device{
				// 23034Mi and a half: rounded down to whole MiB.
				{Name: "gpu-0", Attributes: typed(slice.DeviceTypeGPU), Capacity: mem("24153423872")},
				{Name: "gpu-1-mig-1g10gb-0", Attributes: typed(slice.DeviceTypeMIG), Capacity: mem("23034Mi")},
				// Left alone: a whole GPU on dynamic-MIG counters, a unified-memory GPU.
				{Name: "gpu-2", Attributes: typed(slice.DeviceTypeGPU), Capacity: mem("80Gi"),
					ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-2"}}},
				{Name: "gpu-3", Attributes: typed(slice.DeviceTypeGPU)},
			}
			require.NoError(t, slice.WithConsumableShares(devs, shares))
			for _, d := range devs[:2] {
				require.NotNil(t, d.AllowMultipleAllocations, d.Name)
				require.True(t, *d.AllowMultipleAllocations, d.Name)
				m := d.Capacity[slice.CapacityMemory]
				require.Equal(t, tc.wantMemory, m.Value.String(), d.Name)
				require.Equal(t, tc.wantPolicy, policy(m), d.Name)
				got := ""
				if s, ok := d.Capacity[slice.CapacityShares]; ok {
					got = s.Value.String() + ": " + policy(s)
				}
				require.Equal(t, tc.wantShares, got, d.Name)
			}
			for _, d := range devs[2:] {
				require.Nil(t, d.AllowMultipleAllocations, d.Name)
				require.Empty(t, policy(d.Capacity[slice.CapacityMemory]), d.Name)
			}
		})
	}
	tiny := []resourceapi.Device{{Name: "gpu-0", Attributes: typed(slice.DeviceTypeGPU), Capacity: mem("512Ki")}}
	require.ErrorContains(t, slice.WithConsumableShares(tiny, slice.ConsumableShares{Mode: slice.SharesMemory}), "less than one share of 1Mi")
	off := []resourceapi.Device{{Name: "gpu-0", Attributes: typed(slice.DeviceTypeGPU), Capacity: mem("80Gi")}}
	require.NoError(t, slice.WithConsumableShares(off, slice.ConsumableShares{}))
	require.Nil(t, off[0].AllowMultipleAllocations, "disabled")
}
