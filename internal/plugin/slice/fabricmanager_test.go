package slice_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/sim"
)

// withPartitions gives the node's GPUs the partitions the simulated Fabric
// Manager offers (the HGX 8-GPU table), as the plugin does with
// --fabric-manager-partitioning.
func withPartitions(t *testing.T, node *model.Node) {
	t.Helper()
	p, err := sim.Load("dgx-h100", nil)
	require.NoError(t, err)
	p.FabricManager = sim.FabricManagerSharedNVSwitch
	node.FabricManager = true
	for i := range node.GPUs {
		g := &node.GPUs[i]
		g.FabricPartitions = map[int]int{}
		for _, fp := range p.FabricPartitions() {
			if slices.Contains(fp.Modules, g.ModuleID) {
				g.FabricPartitions[len(fp.Modules)] = fp.ID
			}
		}
	}
}

// TestFabricManagerAttributes: with Fabric Manager partitioning, GPUs and
// vfio devices carry gpuModuleID and partition<N> in both modes, MIG devices
// no partition (and, with NVIDIA's names, no gpuModuleID); without it
// nothing changes (gpuModuleID natively only).
func TestFabricManagerAttributes(t *testing.T) {
	tests := []struct {
		name        string
		fm, nvidia  bool
		wantModule  map[string]bool // by device type
		wantPartion bool
	}{
		{name: "native, off", wantModule: map[string]bool{"gpu": true, "mig": true}},
		{name: "nvidia, off", nvidia: true, wantModule: map[string]bool{}},
		{name: "native, on", fm: true, wantModule: map[string]bool{"gpu": true, "mig": true, "vfio": true}, wantPartion: true},
		{name: "nvidia, on", fm: true, nvidia: true, wantModule: map[string]bool{"gpu": true, "vfio": true}, wantPartion: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := simNode(t, "dgx-h100", "n1")
			mig.Apply(node, mig.ModeDynamic)
			// Two GPUs whole for passthrough, the rest dynamic MIG.
			for i := range 2 {
				node.GPUs[i].Partitioning = model.WholeGPU
			}
			if tc.fm {
				withPartitions(t, node)
			}
			res, err := slice.Resources("n1", node, slice.Options{NVIDIAAttributes: tc.nvidia, Passthrough: true})
			require.NoError(t, err)
			seen := map[string]int{}
			for _, s := range slice.Objects(compat.NVIDIADriverName, "n1", res) {
				for _, d := range s.Spec.Devices {
					typ := *d.Attributes[slice.AttrType].StringValue
					seen[typ]++
					_, hasModule := d.Attributes[slice.AttrGPUModuleID]
					assert.Equal(t, tc.wantModule[typ], hasModule, "%s gpuModuleID", d.Name)
					var parts []resourceapi.QualifiedName
					for _, n := range []int{1, 2, 4, 8} {
						if _, ok := d.Attributes[slice.PartitionAttribute(n)]; ok {
							parts = append(parts, slice.PartitionAttribute(n))
						}
					}
					if !tc.wantPartion || typ == "mig" {
						assert.Empty(t, parts, d.Name)
						continue
					}
					require.Len(t, parts, 4, d.Name)
					module := *d.Attributes[slice.AttrGPUModuleID].IntValue
					assert.Equal(t, int64(0), *d.Attributes["partition8"].IntValue, d.Name)
					assert.Equal(t, 6+module, *d.Attributes["partition1"].IntValue, "%s: module %d", d.Name, module)
				}
			}
			assert.Equal(t, 2, seen["vfio"])
			assert.Positive(t, seen["mig"])
		})
	}
}

// TestGoldenFabricManagerSlices pins a dgx-h100 with Fabric Manager
// partitions and passthrough, published with NVIDIA's names.
// After an intended change: go test ./internal/plugin/slice -run TestGoldenFabricManagerSlices -update
func TestGoldenFabricManagerSlices(t *testing.T) {
	node := simNode(t, "dgx-h100", "golden-node")
	mig.Apply(node, mig.ModeStatic)
	withPartitions(t, node)
	res, err := slice.Resources("golden-node", node, slice.Options{NVIDIAAttributes: true, Passthrough: true})
	require.NoError(t, err)
	got, err := yaml.Marshal(slice.Objects(compat.NVIDIADriverName, "golden-node", res))
	require.NoError(t, err)
	path := filepath.Join("testdata", "dgx-h100.fabricmanager-nvidia.golden.yaml")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run with -update")
	require.Equal(t, string(want), string(got))
}
