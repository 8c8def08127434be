package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hgxProfile is dgx-h100 with Fabric Manager in the given mode.
func hgxProfile(t *testing.T, mode string) *Profile {
	t.Helper()
	data, err := profileFiles.ReadFile("profiles/dgx-h100.yaml")
	require.NoError(t, err)
	p, err := Parse([]byte(strings.Replace(string(data), "name: dgx-h100", "name: dgx-h100-fm\nfabricManager: "+mode, 1)))
	require.NoError(t, err)
	return p
}

// TestFabricPartitions: shared NVSwitch mode offers the HGX 8-GPU table
// (one partition of 8 GPUs, two of 4, four of 2, eight of 1; every module
// in exactly one partition of each size, unique IDs); the other modes
// offer none. The copies are the caller's.
func TestFabricPartitions(t *testing.T) {
	p := hgxProfile(t, "shared-nvswitch")
	require.Equal(t, FabricManagerSharedNVSwitch, p.FabricManager)
	parts := p.FabricPartitions()
	ids := map[int]bool{}
	bySize := map[int][]int{} // size -> modules, in partition order
	count := map[int]int{}
	for _, fp := range parts {
		assert.False(t, ids[fp.ID], "partition %d twice", fp.ID)
		ids[fp.ID] = true
		count[len(fp.Modules)]++
		bySize[len(fp.Modules)] = append(bySize[len(fp.Modules)], fp.Modules...)
	}
	assert.Equal(t, map[int]int{8: 1, 4: 2, 2: 4, 1: 8}, count)
	for size, modules := range bySize {
		slices.Sort(modules)
		assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, modules, "partitions of %d GPUs", size)
	}
	parts[0].Modules[0] = 99
	assert.Equal(t, 1, p.FabricPartitions()[0].Modules[0], "a copy")

	for _, mode := range []string{"bare-metal", "none"} {
		assert.Nil(t, hgxProfile(t, mode).FabricPartitions(), mode)
	}
	def, err := Load("dgx-h100", nil)
	require.NoError(t, err)
	assert.Equal(t, FabricManagerNone, def.FabricManager)
}
