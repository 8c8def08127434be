package slice_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// TestNUMAListAllocation runs the scheduler's allocator (DRAListTypeAttributes
// on) over the mixed node as if its two NUMA nodes were the sub-NUMA
// clusters of one socket (each other's neighbour): an A100 and an L4 on one
// NUMA node never fit the scalar form (the L4s are on node 0, the A100s on
// node 1), and fit the list form, whose lists intersect. A node without
// neighbours publishes one-element lists and allocates as before.
func TestNUMAListAllocation(t *testing.T) {
	const l4 = `device.attributes["gpu.gpudra.io"].productName == "NVIDIA L4"`
	features := structured.Features{PrioritizedList: true, ListTypeAttributes: true}
	for _, tc := range []struct {
		name       string
		list, snc  bool
		wantCount  int
		wantLength int // of every published numaNode list
	}{
		{name: "scalar, SNC", snc: true},
		{name: "list, SNC", list: true, snc: true, wantCount: 2, wantLength: 2},
		{name: "list, no SNC", list: true, wantLength: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := simNode(t, "mixed", "gpu-mixed")
			if tc.snc {
				for i := range node.GPUs {
					node.GPUs[i].NUMANeighbours = []int{1 - *node.GPUs[i].NUMANode}
				}
			}
			res, err := slice.Resources("gpu-mixed", node, slice.Options{NUMAList: tc.list})
			require.NoError(t, err)
			var slices []*resourceapi.ResourceSlice
			for _, s := range slice.Objects(driverName, "gpu-mixed", res) {
				for _, d := range s.Spec.Devices {
					if tc.list {
						a := d.Attributes[numaNode]
						require.Nil(t, a.IntValue, d.Name)
						require.Len(t, a.IntValues, tc.wantLength, d.Name)
					}
				}
				slices = append(slices, &s)
			}
			claim := withCrossConstraint(gpuClaim("c", request{count: 1, selector: a100}, request{count: 1, selector: l4}), numaNode)
			results := allocateWith(t, features, slices, "gpu-mixed", sets.New[structured.DeviceID](), claim)
			require.Len(t, results, tc.wantCount)
		})
	}
}
