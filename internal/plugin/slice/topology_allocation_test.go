package slice_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

const (
	nvlinkDomain = "gpu.gpudra.io/nvlinkDomain" // as claims name it
	numaNode     = "resource.kubernetes.io/numaNode"
	a100         = `device.attributes["gpu.gpudra.io"].productName == "NVIDIA A100-SXM4-40GB"`
)

// withCrossConstraint adds a matchAttribute constraint over all of the
// claim's requests.
func withCrossConstraint(c *resourceapi.ResourceClaim, attr string) *resourceapi.ResourceClaim {
	var names []string
	for _, r := range c.Spec.Devices.Requests {
		names = append(names, r.Name)
	}
	a := resourceapi.FullyQualifiedName(attr)
	c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, resourceapi.DeviceConstraint{Requests: names, MatchAttribute: &a})
	return c
}

// TestTopologyConstraints runs the scheduler's allocator over the published
// slices with matchAttribute on the NVLink domain and the NUMA node.
func TestTopologyConstraints(t *testing.T) {
	slices := cluster(t, map[string]string{"gpu-h100": "dgx-h100", "gpu-mixed": "mixed", "gpu-l4": "l4"})
	tests := []struct {
		name        string
		node        string
		claim       *resourceapi.ResourceClaim
		wantCount   int
		wantProduct string
		sameAttr    resourceapi.QualifiedName // every allocated device has the same, non-empty value
	}{
		{name: "2 NVLink-connected GPUs on the mixed node are the A100 pair", node: "gpu-mixed",
			claim:     gpuClaim("c", request{count: 2, matchAttrs: []string{nvlinkDomain}}),
			wantCount: 2, wantProduct: "NVIDIA A100-SXM4-40GB", sameAttr: slice.AttrNVLinkDomain},
		{name: "3 NVLink-connected GPUs do not exist on the mixed node", node: "gpu-mixed",
			claim: gpuClaim("c", request{count: 3, matchAttrs: []string{nvlinkDomain}})},
		{name: "no NVLink on the L4 node", node: "gpu-l4",
			claim: gpuClaim("c", request{count: 2, matchAttrs: []string{nvlinkDomain}})},
		{name: "all 8 GPUs of a DGX H100 share one NVLink domain", node: "gpu-h100",
			claim:     gpuClaim("c", request{count: 8, matchAttrs: []string{nvlinkDomain}}),
			wantCount: 8, sameAttr: slice.AttrNVLinkDomain},
		{name: "an A100 plus any GPU on its NUMA node gets the other A100, not an L4", node: "gpu-mixed",
			claim:     withCrossConstraint(gpuClaim("c", request{count: 1, selector: a100}, request{count: 1}), numaNode),
			wantCount: 2, wantProduct: "NVIDIA A100-SXM4-40GB", sameAttr: numaNode},
		{name: "an A100 plus two more GPUs on its NUMA node do not fit", node: "gpu-mixed",
			claim: withCrossConstraint(gpuClaim("c", request{count: 1, selector: a100}, request{count: 2}), numaNode)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			results := allocate(t, slices, tc.node, sets.New[structured.DeviceID](), tc.claim)
			require.Len(t, results, tc.wantCount)
			values := sets.New[string]()
			for _, r := range results {
				if tc.wantProduct != "" {
					require.Equal(t, tc.wantProduct, attrOf(slices, r, "productName"))
				}
				if tc.sameAttr != "" {
					values.Insert(attrOf(slices, r, tc.sameAttr))
				}
			}
			if tc.sameAttr != "" {
				require.Equal(t, 1, values.Len(), "one %s for all devices, got %v", tc.sameAttr, values.UnsortedList())
				require.NotEmpty(t, values.UnsortedList()[0])
			}
		})
	}
}
