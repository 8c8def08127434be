package fmsim

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/sim"
)

// fabric is dgx-h100 with Fabric Manager in mode, its state in a temp dir.
func fabric(t *testing.T, mode string) *Fabric {
	t.Helper()
	p, err := sim.Load("dgx-h100", nil)
	require.NoError(t, err)
	p.FabricManager = sim.FabricManagerMode(mode)
	f, err := NewFabric(p, "node-a", filepath.Join(t.TempDir(), StatePath))
	require.NoError(t, err)
	return f
}

// TestNewFabric: the profile's partitions with each GPU's module, UUID and
// bus ID in NVML's form; none outside shared NVSwitch mode.
func TestNewFabric(t *testing.T) {
	f := fabric(t, "shared-nvswitch")
	require.Len(t, f.Partitions, 15)
	all := f.Partitions[0]
	require.Len(t, all.GPUs, 8)
	for i, g := range all.GPUs {
		assert.Equal(t, i+1, g.Module)
		assert.True(t, strings.HasPrefix(g.UUID, "GPU-"), g.UUID)
	}
	assert.Equal(t, "00000000:1B:00.0", all.GPUs[0].PCIBusID)
	assert.Empty(t, fabric(t, "bare-metal").Partitions)
}

// TestFabricRules: the answers of the partition calls, without the C layer.
func TestFabricRules(t *testing.T) {
	f := fabric(t, "shared-nvswitch")
	steps := []struct {
		name string
		call func() nvfm.Return
		want nvfm.Return
	}{
		{"activate 4-GPU partition", func() nvfm.Return { return f.Activate(2) }, nvfm.SUCCESS},
		{"again", func() nvfm.Return { return f.Activate(2) }, nvfm.IN_USE},
		{"overlapping 2-GPU partition", func() nvfm.Return { return f.Activate(6) }, nvfm.IN_USE},
		{"disjoint 2-GPU partition", func() nvfm.Return { return f.Activate(4) }, nvfm.SUCCESS},
		{"unknown", func() nvfm.Return { return f.Activate(15) }, nvfm.BADPARAM},
		{"deactivate", func() nvfm.Return { return f.Deactivate(2) }, nvfm.SUCCESS},
		{"deactivate inactive", func() nvfm.Return { return f.Deactivate(2) }, nvfm.UNINITIALIZED},
		{"deactivate unknown", func() nvfm.Return { return f.Deactivate(-1) }, nvfm.BADPARAM},
		{"set repeated", func() nvfm.Return { return f.SetActivated([]int{7, 7}) }, nvfm.BADPARAM},
		{"set unknown", func() nvfm.Return { return f.SetActivated([]int{20}) }, nvfm.BADPARAM},
		{"set", func() nvfm.Return { return f.SetActivated([]int{14, 1}) }, nvfm.SUCCESS},
	}
	for _, s := range steps {
		assert.Equal(t, s.want, s.call(), s.name)
	}
	parts, active, ret := f.Supported()
	require.Equal(t, nvfm.SUCCESS, ret)
	var ids []int
	for i, p := range parts {
		if active[i] {
			ids = append(ids, p.ID)
		}
	}
	assert.Equal(t, []int{1, 14}, ids)
	s, err := ReadState(f.StateFile)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 14}, s.Active, "sorted")

	bare := fabric(t, "bare-metal")
	_, _, ret = bare.Supported()
	assert.Equal(t, nvfm.NOT_SUPPORTED, ret)
	assert.Equal(t, nvfm.NOT_SUPPORTED, bare.Activate(0))
	assert.Equal(t, nvfm.NOT_SUPPORTED, bare.Deactivate(0))
}

// TestStateFile: a missing file is the empty state, an unknown field is an
// error naming the fields, and concurrent updates (each with its own lock
// file description, as separate processes have) lose nothing.
func TestStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fm.json")
	s, err := ReadState(path)
	require.NoError(t, err)
	assert.Zero(t, s)

	require.NoError(t, os.WriteFile(path, []byte(`{"activ": [1]}`), 0o644))
	_, err = ReadState(path)
	require.ErrorContains(t, err, "fields: active, initializing")
	f := &Fabric{StateFile: path, Mode: sim.FabricManagerSharedNVSwitch}
	assert.Equal(t, nvfm.GENERIC_ERROR, f.Activate(0))
	require.NoError(t, os.Remove(path))

	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			assert.NoError(t, UpdateState(path, func(s *State) bool {
				s.Active = append(s.Active, i)
				return true
			}))
		})
	}
	wg.Wait()
	s, err = ReadState(path)
	require.NoError(t, err)
	assert.Len(t, s.Active, 20)
}
