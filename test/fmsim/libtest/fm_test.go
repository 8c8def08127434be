package libtest

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/fmsim"
	"github.com/gpudra/gpudra/test/sim"
)

func cstr(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// active lists the active partitions FM reports.
func active(t *testing.T, h nvfm.Handle) []uint32 {
	t.Helper()
	list, ret := h.GetSupportedFabricPartitions()
	require.Equal(t, nvfm.SUCCESS, ret)
	var ids []uint32
	for _, p := range list.PartitionInfo[:list.NumPartitions] {
		if p.IsActive == 1 {
			ids = append(ids, p.PartitionId)
		}
	}
	return ids
}

// TestSupportedPartitions: the HGX 8-GPU table through go-nvfm, each GPU
// named by its module ID, UUID and bus ID as the simulated NVML of the
// same root reports them; nothing active at first.
func TestSupportedPartitions(t *testing.T) {
	root := newRoot(t, "shared-nvswitch")
	socket, _ := startDaemon(t, root)
	h := connect(t, open(t, root), socket)
	list, ret := h.GetSupportedFabricPartitions()
	require.Equal(t, nvfm.SUCCESS, ret)
	require.Equal(t, uint32(15), list.NumPartitions)
	require.Equal(t, uint32(nvfm.MAX_FABRIC_PARTITIONS), list.MaxNumPartitions)

	p, err := sim.Load(filepath.Join(root, "etc/gpudra-sim/profile.yaml"), nil)
	require.NoError(t, err)
	srv := sim.NewServer(p, node)
	require.Equal(t, nvml.SUCCESS, srv.Init())
	defer func() { _ = srv.Shutdown() }()
	type gpu struct{ uuid, bus string }
	byModule := map[uint32]gpu{}
	for i, g := range p.GPUs {
		d, _ := srv.DeviceGetHandleByIndex(i)
		uuid, _ := d.GetUUID()
		pci, _ := d.GetPciInfo()
		byModule[uint32(g.ModuleID)] = gpu{uuid, cstr(pci.BusId[:])}
	}
	sizes := map[uint32]int{}
	for _, part := range list.PartitionInfo[:list.NumPartitions] {
		assert.Zero(t, part.IsActive, "partition %d", part.PartitionId)
		sizes[part.NumGpus]++
		for _, g := range part.GpuInfo[:part.NumGpus] {
			want := byModule[g.PhysicalId]
			assert.Equal(t, want.uuid, cstr(g.Uuid[:]), "module %d", g.PhysicalId)
			assert.Equal(t, want.bus, cstr(g.PciBusId[:]), "module %d", g.PhysicalId)
		}
	}
	assert.Equal(t, map[uint32]int{8: 1, 4: 2, 2: 4, 1: 8}, sizes)
	assert.Equal(t, uint32(8), list.PartitionInfo[0].NumGpus)
}

// TestActivateDeactivate: FM's answers to activation and deactivation: a
// second activation and one overlapping an active partition IN_USE, an
// unknown ID BADPARAM, deactivating an inactive partition UNINITIALIZED
// (nv_fm_agent.h's code), and the state seen by a second connection.
func TestActivateDeactivate(t *testing.T) {
	root := newRoot(t, "shared-nvswitch")
	socket, _ := startDaemon(t, root)
	lib := open(t, root)
	h := connect(t, lib, socket)
	other := connect(t, lib, socket)

	require.Equal(t, nvfm.SUCCESS, h.ActivateFabricPartition(1)) // modules 1-4
	assert.Equal(t, nvfm.IN_USE, h.ActivateFabricPartition(1), "already active")
	assert.Equal(t, nvfm.IN_USE, h.ActivateFabricPartition(3), "modules 1,3 are in partition 1")
	assert.Equal(t, nvfm.IN_USE, h.ActivateFabricPartition(0), "all eight overlap")
	assert.Equal(t, nvfm.BADPARAM, h.ActivateFabricPartition(99))
	require.Equal(t, nvfm.SUCCESS, h.ActivateFabricPartition(5)) // modules 5,7
	assert.Equal(t, []uint32{1, 5}, active(t, other))

	require.Equal(t, nvfm.SUCCESS, other.DeactivateFabricPartition(1))
	assert.Equal(t, nvfm.UNINITIALIZED, other.DeactivateFabricPartition(1), "not active")
	assert.Equal(t, nvfm.BADPARAM, other.DeactivateFabricPartition(99))
	require.Equal(t, nvfm.SUCCESS, h.ActivateFabricPartition(3))
	assert.Equal(t, []uint32{3, 5}, active(t, h))
	assert.Equal(t, nvfm.NOT_SUPPORTED, h.ActivateFabricPartitionWithVFs(4, nil))

	require.Equal(t, nvfm.SUCCESS, h.SetActivatedFabricPartitions([]nvfm.FabricPartitionId{7}))
	assert.Equal(t, []uint32{7}, active(t, h))
	assert.Equal(t, nvfm.BADPARAM, h.SetActivatedFabricPartitions([]nvfm.FabricPartitionId{0, 7}), "overlapping")

	failed, ret := h.GetNvlinkFailedDevices()
	require.Equal(t, nvfm.SUCCESS, ret)
	assert.Zero(t, failed.NumGpus)
	unsupported, ret := h.GetUnsupportedFabricPartitions()
	require.Equal(t, nvfm.SUCCESS, ret)
	assert.Zero(t, unsupported.NumPartitions)
}

// TestStateSharedAcrossProcesses: another process using the same root
// sees and changes the same fabric.
func TestStateSharedAcrossProcesses(t *testing.T) {
	if root := os.Getenv("FMSIM_LIBTEST_CHILD_ROOT"); root != "" {
		h := connect(t, open(t, root), filepath.Join(root, fmsim.SocketPath))
		require.Equal(t, []uint32{2}, active(t, h), "the parent's activation")
		require.Equal(t, nvfm.SUCCESS, h.ActivateFabricPartition(3))
		return
	}
	root := newRoot(t, "shared-nvswitch")
	socket, _ := startDaemon(t, root)
	h := connect(t, open(t, root), socket)
	require.Equal(t, nvfm.SUCCESS, h.ActivateFabricPartition(2))
	cmd := exec.Command(os.Args[0], "-test.run=^TestStateSharedAcrossProcesses$", "-test.v")
	cmd.Env = append(os.Environ(), "FMSIM_LIBTEST_CHILD_ROOT="+root, libEnv+"="+libPath)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, []uint32{2, 3}, active(t, h))
}

// TestFabricManagerUnavailable: without the daemon's socket connecting
// fails CONNECTION_NOT_VALID (also over TCP: the simulated daemon has no
// TCP listener), and calls on a connection fail once the daemon is gone;
// in bare-metal mode and without Fabric Manager the partition calls answer
// NOT_SUPPORTED; while FM initializes, NOT_CONFIGURED.
func TestFabricManagerUnavailable(t *testing.T) {
	t.Run("no daemon", func(t *testing.T) {
		root := newRoot(t, "shared-nvswitch")
		lib := open(t, root)
		_, ret := lib.Connect(nvfm.WithUnixSocket(filepath.Join(root, fmsim.SocketPath)))
		assert.Equal(t, nvfm.CONNECTION_NOT_VALID, ret)
		_, ret = lib.Connect(nvfm.WithAddress("127.0.0.1"))
		assert.Equal(t, nvfm.CONNECTION_NOT_VALID, ret)
		// A regular file where the socket belongs is no daemon either.
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(fmsim.SocketPath)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, fmsim.SocketPath), nil, 0o644))
		_, ret = lib.Connect(nvfm.WithUnixSocket(filepath.Join(root, fmsim.SocketPath)))
		assert.Equal(t, nvfm.CONNECTION_NOT_VALID, ret)
	})
	t.Run("daemon stops", func(t *testing.T) {
		root := newRoot(t, "shared-nvswitch")
		socket, stop := startDaemon(t, root)
		h := connect(t, open(t, root), socket)
		stop()
		_, ret := h.GetSupportedFabricPartitions()
		assert.Equal(t, nvfm.CONNECTION_NOT_VALID, ret)
		assert.Equal(t, nvfm.CONNECTION_NOT_VALID, h.ActivateFabricPartition(1))
	})
	for _, mode := range []string{"bare-metal", "none"} {
		t.Run(mode, func(t *testing.T) {
			root := newRoot(t, mode)
			socket, _ := startDaemon(t, root)
			h := connect(t, open(t, root), socket)
			_, ret := h.GetSupportedFabricPartitions()
			assert.Equal(t, nvfm.NOT_SUPPORTED, ret)
			assert.Equal(t, nvfm.NOT_SUPPORTED, h.ActivateFabricPartition(1))
		})
	}
	t.Run("initializing", func(t *testing.T) {
		root := newRoot(t, "shared-nvswitch")
		socket, _ := startDaemon(t, root)
		require.NoError(t, fmsim.UpdateState(filepath.Join(root, fmsim.StatePath), func(s *fmsim.State) bool {
			s.Initializing = true
			return true
		}))
		h := connect(t, open(t, root), socket)
		_, ret := h.GetSupportedFabricPartitions()
		assert.Equal(t, nvfm.NOT_CONFIGURED, ret)
		assert.Equal(t, nvfm.NOT_CONFIGURED, h.ActivateFabricPartition(1))
	})
}

// TestInitIsNotReferenceCounted: nv_fm_agent.h answers IN_USE to a second
// fmLibInit; go-nvfm counts per library object, so a second object in one
// process gets it.
func TestInitIsNotReferenceCounted(t *testing.T) {
	root := newRoot(t, "shared-nvswitch")
	first := open(t, root)
	second := nvfm.New(nvfm.WithLibraryPath(filepath.Join(root, libDir, "libnvfm.so")))
	assert.Equal(t, nvfm.IN_USE, second.Init())
	assert.Equal(t, nvfm.SUCCESS, first.Init(), "go-nvfm's own count")
	assert.Equal(t, nvfm.SUCCESS, first.Shutdown())
}

// TestEveryGoNVFMSymbolExists: the library defines every function of
// go-nvfm's nv_fm_agent.h (go-nvfm binds them lazily: a missing one kills
// the process at its call).
func TestEveryGoNVFMSymbolExists(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvfm").Output()
	require.NoError(t, err)
	header, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg/nvfm/nv_fm_agent.h"))
	require.NoError(t, err)
	var want []string
	for _, m := range regexp.MustCompile(`fmReturn_t FM_LIB_API (\w+)\(`).FindAllStringSubmatch(string(header), -1) {
		want = append(want, m[1])
	}
	require.NotEmpty(t, want)
	f, err := elf.Open(libPath)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var have []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			have = append(have, s.Name)
		}
	}
	for _, w := range want {
		assert.True(t, slices.Contains(have, w), "%s is not defined", w)
	}
	t.Logf("%d functions of nv_fm_agent.h: %s", len(want), strings.Join(want, " "))
}
