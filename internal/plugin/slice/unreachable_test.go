package slice_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// A GPU published from its last known identity carries the NoExecute lost
// taint on all its devices, also without a health monitor; slices with
// taints hold at most 64 devices, as the API requires.
func TestUnreachableGPUTainted(t *testing.T) {
	node := simNode(t, "dgx-h100", "node-a")
	mig.Apply(node, mig.ModeDynamic)
	node.GPUs[3].Unreachable = "gpu-is-lost"
	devices, err := slice.Devices(node)
	require.NoError(t, err)
	tainted := 0
	for _, d := range devices {
		if health.GPUOf(d) != node.GPUs[3].UUID {
			require.Empty(t, d.Taints, d.Name)
			continue
		}
		tainted++
		require.Equal(t, []resourceapi.DeviceTaint{{Key: "gpu.gpudra.io/lost", Value: "gpu-is-lost", Effect: resourceapi.DeviceTaintEffectNoExecute}},
			d.Taints, d.Name)
	}
	require.Greater(t, tainted, 1, "the whole GPU and its MIG placements")

	mig.Apply(node, mig.ModeOff)
	res, err := slice.Resources("node-a", node, slice.Options{})
	require.NoError(t, err)
	require.Len(t, res.Pools["node-a"].Slices, 1)
	require.Len(t, res.Pools["node-a"].Slices[0].Devices, 8)
	many := make([]resourceapi.Device, 100)
	for i := range many {
		many[i].Name = "d" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	many[7].Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	packed := slice.Pack("node-a", many, slice.Options{})
	require.Len(t, packed.Pools["node-a"].Slices, 2, "a tainted device lowers the limit to 64")
}
