package prepare

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/fabricmanager"
	"github.com/gpudra/gpudra/internal/plugin/vfio"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// withFM gives e's GPUs the module IDs 1… and Fabric Manager partitioning
// on the real path: go-nvfm loading the simulated libnvfm of a fake driver
// root whose profile runs FM in shared NVSwitch mode, no partition active.
// The HGX table: 0 all eight, 1 {1-4}, 2 {5-8}, 3 {1,3}, 4 {2,4},
// 5 {5,7}, 6 {6,8}, 7-14 one each (7 is module 1, gpu-0 here).
func withFM(t *testing.T, e *env) *fabricmanager.Manager {
	root := fakedriver.FMRootForTest(t)
	for i := range e.node.GPUs {
		e.node.GPUs[i].ModuleID = i + 1
	}
	fm, err := fabricmanager.Open(ctx(t), fabricmanager.Options{DriverRoot: root, LockFile: filepath.Join(e.lockDir, "fm.lock")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fm.Close()) })
	e.fm = fm
	return fm
}

// activeSet lists the active partitions as Fabric Manager reports them.
func activeSet(t *testing.T, fm *fabricmanager.Manager) []int {
	t.Helper()
	var out []int
	for _, p := range fm.Partitions() {
		on, err := fm.Active(p.ID)
		require.NoError(t, err)
		if on {
			out = append(out, p.ID)
		}
	}
	return out
}

// TestFabricPartitionPrepareUnprepare: prepare activates the partition of
// exactly the claim's GPUs (recorded in the claim's record), an active one
// is left, a claim whose GPUs form none or whose partition FM refuses
// fails and leaves nothing; unprepare deactivates.
func TestFabricPartitionPrepareUnprepare(t *testing.T) {
	tests := []struct {
		name       string
		before     []int // activated before the prepare
		devices    []string
		partition  int
		modules    []int
		err        string
		afterUnpre []int
	}{
		{name: "one GPU", devices: []string{"gpu-0"}, partition: 7, modules: []int{1}},
		{name: "four GPUs", devices: []string{"gpu-3", "gpu-1", "gpu-0", "gpu-2"}, partition: 1, modules: []int{1, 2, 3, 4}},
		{name: "two GPUs", devices: []string{"gpu-4", "gpu-6"}, partition: 5, modules: []int{5, 7}},
		{name: "all eight", devices: []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"}, partition: 0,
			modules: []int{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "already active", before: []int{3}, devices: []string{"gpu-0", "gpu-2"}, partition: 3, modules: []int{1, 3}},
		{name: "another partition active stays", before: []int{2}, devices: []string{"gpu-0"}, partition: 7, modules: []int{1},
			afterUnpre: []int{2}},
		{name: "no matching partition", devices: []string{"gpu-0", "gpu-1"},
			err: "devices [gpu-0 gpu-1] (GPU modules [1 2]) do not form an NVSwitch Fabric Manager partition of this node: " +
				"allocate GPUs that do, e.g. with a matchAttribute on partition2"},
		{name: "overlaps an active partition", before: []int{0}, devices: []string{"gpu-0"},
			err: "activate NVSwitch Fabric Manager partition 7 (GPU modules [1]): ", afterUnpre: []int{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 8)
			fm := withFM(t, e)
			for _, id := range tc.before {
				_, err := fm.Activate(ctx(t), id)
				require.NoError(t, err)
			}
			m, _ := e.manager()
			c := gpuClaim(uidA, "fm", tc.devices...)
			_, err := m.Prepare(ctx(t), c)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				rec, err := m.cfg.Checkpoints.Get(uidA)
				require.NoError(t, err)
				require.Nil(t, rec, "a failed prepare leaves no record")
				require.Equal(t, tc.before, activeSet(t, fm), "nothing changed")
				return
			}
			require.NoError(t, err)
			rec, err := m.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			require.Equal(t, &checkpoint.FabricPartition{ID: tc.partition, Modules: tc.modules}, rec.FabricPartition)
			want := append([]int{}, tc.before...)
			if len(want) == 0 || want[0] != tc.partition {
				want = append(want, tc.partition)
			}
			assert.ElementsMatch(t, want, activeSet(t, fm))

			_, err = m.Prepare(ctx(t), c)
			require.NoError(t, err, "a repeated prepare")
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			require.Equal(t, tc.afterUnpre, activeSet(t, fm))
		})
	}
}

// TestFabricPartitionUnprepareInactive: a partition deactivated behind the
// plugin's back is left (FM would answer UNINITIALIZED), and the claim is
// unprepared.
func TestFabricPartitionUnprepareInactive(t *testing.T) {
	e := newEnv(t, 8)
	fm := withFM(t, e)
	m, _ := e.manager()
	c := gpuClaim(uidA, "fm", "gpu-1", "gpu-3")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Equal(t, []int{4}, activeSet(t, fm))
	changed, err := fm.Deactivate(ctx(t), 4)
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	rec, err := m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Nil(t, rec)
	require.Empty(t, activeSet(t, fm))
}

// TestFabricPartitionCrash: the plugin dies after the PrepareStarted record
// (with the partition) before activating, or right after activating; the
// restarted plugin's Recover rolls the claim back, deactivating what is
// active, and the kubelet's next prepare works.
func TestFabricPartitionCrash(t *testing.T) {
	for _, tc := range []struct {
		phase      string
		activeDead []int // when the plugin died
	}{
		{phase: phaseStarted},
		{phase: phaseFabricPartitionActivated, activeDead: []int{7}},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			e := newEnv(t, 8)
			fm := withFM(t, e)
			m, _ := e.manager()
			c := gpuClaim(uidA, "fm", "gpu-0")
			crash(t, tc.phase, func() { _, _ = m.Prepare(ctx(t), c) })
			rec, err := m.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			require.Equal(t, checkpoint.PrepareStarted, rec.State)
			require.Equal(t, &checkpoint.FabricPartition{ID: 7, Modules: []int{1}}, rec.FabricPartition)
			require.Equal(t, tc.activeDead, activeSet(t, fm))

			m2, rep := e.manager()
			require.Equal(t, 1, rep.RolledBack)
			require.Empty(t, rep.Failed)
			require.Empty(t, activeSet(t, fm))
			rec, err = m2.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			require.Nil(t, rec)

			_, err = m2.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.Equal(t, []int{7}, activeSet(t, fm))
		})
	}
}

// TestFabricPartitionRestartThenUnprepare: after a restart the record says
// what to deactivate.
func TestFabricPartitionRestartThenUnprepare(t *testing.T) {
	e := newEnv(t, 8)
	fm := withFM(t, e)
	m, _ := e.manager()
	c := gpuClaim(uidA, "fm", "gpu-4", "gpu-5", "gpu-6", "gpu-7")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	m2, rep := e.manager()
	require.Equal(t, 1, rep.Restored)
	require.Equal(t, []int{2}, activeSet(t, fm), "a restart changes nothing")
	require.NoError(t, m2.Unprepare(ctx(t), ref(c)))
	require.Empty(t, activeSet(t, fm))
}

// TestFabricPartitionHeldByAnother: while another prepared claim holds one
// of its GPUs (admin access here), a partition stays active; the last
// claim's unprepare deactivates it.
func TestFabricPartitionHeldByAnother(t *testing.T) {
	e := newEnv(t, 8)
	fm := withFM(t, e)
	m, _ := e.manager()
	a := gpuClaim(uidA, "workload", "gpu-0")
	b := claim(uidB, "monitor", []alloc{{request: "gpu", device: "gpu-0", admin: true}})
	_, err := m.Prepare(ctx(t), a)
	require.NoError(t, err)
	_, err = m.Prepare(ctx(t), b)
	require.NoError(t, err)
	require.Equal(t, []int{7}, activeSet(t, fm))
	require.NoError(t, m.Unprepare(ctx(t), ref(a)))
	require.Equal(t, []int{7}, activeSet(t, fm), "the monitor still holds gpu-0")
	require.NoError(t, m.Unprepare(ctx(t), ref(b)))
	require.Empty(t, activeSet(t, fm))
}

// TestFabricPartitionVFIO: a claim of vfio devices activates the partition
// of their GPUs, and unprepare deactivates it once the GPUs are back with
// nvidia.
func TestFabricPartitionVFIO(t *testing.T) {
	e, k, _ := vfioEnv(t, 8)
	fm := withFM(t, e)
	m, _ := e.manager()
	c := gpuClaim(uidA, "vm", "gpu-vfio-0", "gpu-vfio-2")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Equal(t, []int{3}, activeSet(t, fm))
	require.Equal(t, vfio.DriverVFIO, driverOf(t, k, e.node.GPUs[2].PCIBusID))
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	require.Empty(t, activeSet(t, fm))
	require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, e.node.GPUs[2].PCIBusID))
}

// TestFabricPartitionOff: without Fabric Manager partitioning nothing is
// recorded, and a record that names a partition (prepared while it was on)
// is unprepared, the partition left as it is.
func TestFabricPartitionOff(t *testing.T) {
	e := newEnv(t, 8)
	fm := withFM(t, e)
	m, _ := e.manager()
	c := gpuClaim(uidA, "fm", "gpu-0")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	e.fm = nil
	m2, _ := e.manager()
	_, err = m2.Prepare(ctx(t), c)
	require.NoError(t, err, "a repeated prepare of the claim")
	require.NoError(t, m2.Unprepare(ctx(t), ref(c)))
	require.Equal(t, []int{7}, activeSet(t, fm), "left active")
	_, err = m2.Prepare(ctx(t), c)
	require.NoError(t, err)
	rec, err := m2.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Nil(t, rec.FabricPartition)
}
