package fakedriver

import (
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
)

// TestGenerateNUMANeighbours: the root's sysfs holds the host's NUMA nodes
// (SLIT distances, CPUs and their sockets), so discovery over it finds each
// GPU's NUMA neighbours as on a real host: with sub-NUMA clustering the
// other node of the GPU's socket, on a two-socket host without it none.
func TestGenerateNUMANeighbours(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		profile string
		want    [][]int
	}{
		{"../../test/localcluster/profiles/l4-snc2.yaml", [][]int{{1}, {0}, {3}, {2}}},
		{"mixed", [][]int{nil, nil, nil, nil}},
	} {
		t.Run(filepath.Base(tc.profile), func(t *testing.T) {
			opts := testInputs(t, tc.profile)
			require.NoError(t, Generate(opts))
			srv, _ := simulated(t, tc.profile, nil)
			node, err := discovery.Discover(t.Context(), struct{ nvml.Interface }{srv},
				discovery.Options{SysfsRoot: filepath.Join(opts.Dir, "sys")})
			require.NoError(t, err)
			var got [][]int
			for _, g := range node.GPUs {
				got = append(got, g.NUMANeighbours)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
