package inventory

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

func gpu(index int, uuid, bus string) model.GPU {
	return model.GPU{Index: index, Minor: index, UUID: uuid, PCIBusID: bus, ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30}
}

var (
	g0 = gpu(0, "GPU-0", "0000:1b:00.0")
	g1 = gpu(1, "GPU-1", "0000:43:00.0")
	g2 = gpu(2, "GPU-2", "0000:52:00.0")
)

func lost(index int) model.UnavailableGPU {
	return model.UnavailableGPU{Index: index, Reason: "gpu-is-lost", Error: "NVML get handle of GPU: GPU is lost"}
}

func TestReconcile(t *testing.T) {
	known := []model.GPU{g0, g1, g2}
	moved := g2
	moved.Index, moved.Minor = 1, 1 // GPU-1 gone from the bus: GPU-2 is now index 1 (and, say, minor 1)
	tests := []struct {
		name      string
		gpus      []model.GPU
		unavail   []model.UnavailableGPU
		known     []model.GPU
		published map[int]string // unavailable index -> device name
		withheld  map[int]string // unavailable index -> part of the reason
		remember  []string       // UUIDs
	}{
		{name: "lost GPU known by index", gpus: []model.GPU{g0, g2}, unavail: []model.UnavailableGPU{lost(1)}, known: known,
			published: map[int]string{1: "gpu-1"}, remember: []string{"GPU-0", "GPU-1", "GPU-2"}},
		{name: "no inventory: withheld", gpus: []model.GPU{g0, g2}, unavail: []model.UnavailableGPU{lost(1)},
			withheld: map[int]string{1: "never seen"}, remember: []string{"GPU-0", "GPU-2"}},
		{name: "known by PCI bus ID, not index", gpus: []model.GPU{g0},
			unavail: []model.UnavailableGPU{{Index: 1, PCIBusID: g2.PCIBusID, Reason: "unreachable"}}, known: known,
			published: map[int]string{1: "gpu-2"}, remember: []string{"GPU-0", "GPU-2"}},
		{name: "unknown PCI bus ID", gpus: []model.GPU{g0},
			unavail: []model.UnavailableGPU{{Index: 1, PCIBusID: "0000:99:00.0"}}, known: known,
			withheld: map[int]string{1: "0000:99:00.0"}, remember: []string{"GPU-0"}},
		{name: "another UUID than last known", gpus: []model.GPU{g0, g2},
			unavail: []model.UnavailableGPU{{Index: 1, UUID: "GPU-new", Reason: "unreachable"}}, known: known,
			withheld: map[int]string{1: "GPU-new"}, remember: []string{"GPU-0", "GPU-2"}},
		{name: "indexes shifted: the entry at the index answers elsewhere", gpus: []model.GPU{g0, moved},
			unavail: []model.UnavailableGPU{lost(2)}, known: known,
			withheld: map[int]string{2: "belongs to a GPU that answers"}, remember: []string{"GPU-0", "GPU-2"}},
		{name: "two lost GPUs", gpus: []model.GPU{g0}, unavail: []model.UnavailableGPU{lost(1), lost(2)}, known: known,
			published: map[int]string{1: "gpu-1", 2: "gpu-2"}, remember: []string{"GPU-0", "GPU-1", "GPU-2"}},
		{name: "forgets GPUs no longer counted", gpus: []model.GPU{g0}, known: known, remember: []string{"GPU-0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := &model.Node{GPUs: append([]model.GPU(nil), tc.gpus...), Unavailable: append([]model.UnavailableGPU(nil), tc.unavail...)}
			remember := Reconcile(node, tc.known)
			var got []string
			for _, g := range remember {
				got = append(got, g.UUID)
				assert.Empty(t, g.Unreachable, "the inventory keeps identities, not conditions")
			}
			assert.Equal(t, tc.remember, got)
			assert.Len(t, node.GPUs, len(tc.gpus)+len(tc.published))
			for i := 1; i < len(node.GPUs); i++ {
				assert.Less(t, node.GPUs[i-1].Index, node.GPUs[i].Index, "GPUs stay in index order")
			}
			for _, u := range node.Unavailable {
				if name, ok := tc.published[u.Index]; ok {
					assert.Equal(t, name, u.PublishedAs)
					assert.Empty(t, u.Withheld)
					var g *model.GPU
					for i := range node.GPUs {
						if node.GPUs[i].DeviceName() == name {
							g = &node.GPUs[i]
						}
					}
					require.NotNil(t, g, "published GPU in node.GPUs")
					assert.Equal(t, u.Index, g.Index, "published under its current index")
					assert.Equal(t, u.Reason, g.Unreachable)
					assert.Equal(t, g.UUID, u.UUID, "the unavailable entry learns the identity")
					continue
				}
				assert.Empty(t, u.PublishedAs)
				assert.Contains(t, u.Withheld, tc.withheld[u.Index])
			}
		})
	}
}

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s := New(dir, "node-a")
	got, err := s.Load()
	require.NoError(t, err, "no file: nothing known")
	require.Empty(t, got)

	numa := 1
	withNUMA := g1
	withNUMA.NUMANode = &numa
	withNUMA.MIG = &model.MIGGeometry{}
	require.NoError(t, s.Save([]model.GPU{g0, withNUMA}))
	got, err = s.Load()
	require.NoError(t, err)
	assert.Equal(t, []model.GPU{g0, withNUMA}, got)
	info, err := os.Stat(s.Path())
	require.NoError(t, err)
	require.NoError(t, s.Save([]model.GPU{g0, withNUMA}))
	again, err := os.Stat(s.Path())
	require.NoError(t, err)
	assert.Equal(t, info.ModTime(), again.ModTime(), "an unchanged inventory is not rewritten")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")

	_, err = New(dir, "node-b").Load()
	assert.ErrorContains(t, err, `recorded on node "node-a"`)
	for name, content := range map[string]string{
		"damaged": `{"version":1,"node":"node-a","gpus":[{`,
		"newer":   `{"version":2,"node":"node-a","gpus":[]}`,
	} {
		require.NoError(t, os.WriteFile(s.Path(), []byte(content), 0o600))
		_, err = s.Load()
		assert.Error(t, err, name)
	}
	require.NoError(t, os.Remove(s.Path()))
	require.NoError(t, os.Mkdir(s.Path(), 0o700))
	_, err = s.Load()
	assert.Error(t, err, "a directory in the way")
	assert.Error(t, s.Save(nil))
}

// Restore: a damaged inventory is not fatal, the unavailable GPU is
// withheld, and the file is repaired from what was discovered.
func TestRestore(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	s := New(dir, "node-a")
	node := &model.Node{GPUs: []model.GPU{g0, g1, g2}}
	Restore(ctx, s, node)
	require.Len(t, node.GPUs, 3)

	node = &model.Node{GPUs: []model.GPU{g0, g2}, Unavailable: []model.UnavailableGPU{lost(1)}}
	Restore(ctx, s, node)
	require.Len(t, node.GPUs, 3)
	assert.Equal(t, "gpu-is-lost", node.GPUs[1].Unreachable)
	assert.Equal(t, "GPU-1", node.GPUs[1].UUID)
	known, err := s.Load()
	require.NoError(t, err)
	assert.Len(t, known, 3, "a restored GPU stays known while it is lost")

	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o600))
	node = &model.Node{GPUs: []model.GPU{g0, g2}, Unavailable: []model.UnavailableGPU{lost(1)}}
	Restore(context.Background(), s, node)
	require.Len(t, node.GPUs, 2)
	assert.Contains(t, node.Unavailable[0].Withheld, "never seen")
	known, err = s.Load()
	require.NoError(t, err, "the damaged file was replaced")
	assert.Len(t, known, 2)
}
