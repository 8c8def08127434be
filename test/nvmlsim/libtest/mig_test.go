package libtest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

func profileNamed(t *testing.T, geo *model.MIGGeometry, name string) model.MIGProfile {
	t.Helper()
	i := slices.IndexFunc(geo.Profiles, func(p model.MIGProfile) bool { return p.Name == name })
	require.GreaterOrEqual(t, i, 0, name)
	return geo.Profiles[i]
}

// TestDynamicMIG drives internal/plugin/mig's create/list/destroy through the library
// and through the in-process simulator side by side: same placements,
// same instances, same MIG device UUIDs. The MIG state survives the last
// nvmlShutdown (the state file), as on a real GPU.
func TestDynamicMIG(t *testing.T) {
	root := newRoot(t, "dgx-h100")
	lib := open(t, root)
	node, err := discovery.Discover(ctx(t), lib, discovery.Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	gpu := node.GPUs[2]
	geo := gpu.MIG
	require.NotNil(t, geo)
	want, srv := inProcess(t, "dgx-h100")
	require.Equal(t, want.GPUs[2].MIG, geo, "same profiles and placements")

	viaLib, viaSim := mig.NewManager(lib), mig.NewManager(srv)
	var created []mig.Instance
	for _, c := range []struct {
		profile string
		start   int
	}{{"3g.40gb", 4}, {"1g.10gb", 0}, {"1g.10gb", 1}} {
		p := profileNamed(t, geo, c.profile)
		require.Contains(t, p.Placements, c.start)
		got, err := viaLib.Create(gpu.UUID, p, c.start)
		require.NoError(t, err)
		exp, err := viaSim.Create(gpu.UUID, p, c.start)
		require.NoError(t, err)
		require.Equal(t, exp, got)
		require.Regexp(t, "^MIG-", got.UUID)
		created = append(created, got)
	}
	_, err = viaLib.Create(gpu.UUID, profileNamed(t, geo, "2g.20gb"), 4)
	require.ErrorIs(t, err, mig.ErrOccupied)

	insts, err := viaLib.Instances(gpu.UUID, geo)
	require.NoError(t, err)
	require.ElementsMatch(t, created, insts)
	node, err = discovery.Discover(ctx(t), lib, discovery.Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	var uuids []string
	for _, d := range node.GPUs[2].MIGDevices {
		uuids = append(uuids, d.UUID)
	}
	require.ElementsMatch(t, []string{created[0].UUID, created[1].UUID, created[2].UUID}, uuids)

	// The last nvmlShutdown drops the simulated node; the state file keeps
	// the GPU's MIG configuration for the next nvmlInit.
	ok(t, lib.Shutdown())
	state, err := os.ReadFile(filepath.Join(root, stateFile))
	require.NoError(t, err)
	require.Contains(t, string(state), created[0].UUID)
	ok(t, lib.Init())
	insts, err = viaLib.Instances(gpu.UUID, geo)
	require.NoError(t, err)
	require.ElementsMatch(t, created, insts, "MIG devices survive nvmlShutdown + nvmlInit")
	d, ret := lib.DeviceGetHandleByUUID(created[1].UUID)
	ok(t, ret)
	name, ret := d.GetName()
	ok(t, ret)
	require.Equal(t, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", name)

	require.ErrorIs(t, viaLib.ReleaseForWholeGPU(gpu.UUID, geo), mig.ErrOccupied)
	for _, inst := range created {
		require.NoError(t, viaLib.Destroy(inst))
	}
	require.NoError(t, viaLib.ReleaseForWholeGPU(gpu.UUID, geo))
	_, ret = lib.DeviceGetHandleByUUID(created[1].UUID)
	require.Equal(t, nvml.ERROR_NOT_FOUND, ret)

	ok(t, lib.Shutdown())
	ok(t, lib.Init())
	dev, ret := lib.DeviceGetHandleByUUID(gpu.UUID)
	ok(t, ret)
	mode, _, ret := dev.GetMigMode()
	ok(t, ret)
	require.Equal(t, nvml.DEVICE_MIG_DISABLE, mode, "MIG mode off survives too")
}

// TestHandlesOutliveSessions: nvcdi takes handles in one Init/Shutdown
// session and uses them in the next; real NVML's handles allow it.
func TestHandlesOutliveSessions(t *testing.T) {
	root := newRoot(t, staticMIG)
	lib := open(t, root)
	gpu, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, ret)
	migDev, ret := gpu.GetMigDeviceHandleByIndex(0)
	ok(t, ret)
	migUUID, ret := migDev.GetUUID()
	ok(t, ret)

	ok(t, lib.Shutdown())
	_, ret = gpu.GetUUID()
	require.Equal(t, nvml.ERROR_UNINITIALIZED, ret)
	ok(t, lib.Init())

	again, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, ret)
	require.Equal(t, gpu, again, "same handle")
	u, ret := migDev.GetUUID()
	ok(t, ret)
	require.Equal(t, migUUID, u)
}
