package libtest

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/sim"
)

// staticMIG is a profile with MIG enabled and MIG devices at start.
const staticMIG = "../../../internal/plugin/slice/testdata/static-mig.yaml"

// server is an in-process sim.Server for the node the roots simulate.
func server(t *testing.T, profile string) *sim.Server {
	t.Helper()
	p, err := sim.Load(profile, nil)
	require.NoError(t, err)
	srv := sim.NewServer(p, node)
	ok(t, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	return srv
}

// inProcess discovers the node an in-process sim.Server simulates.
func inProcess(t *testing.T, profile string) (*model.Node, *sim.Server) {
	t.Helper()
	srv := server(t, profile)
	n, err := discovery.Discover(ctx(t), srv, discovery.Options{})
	require.NoError(t, err)
	return n, srv
}

// TestDiscoverMatchesInProcess: internal/plugin/discovery sees the same node through
// the library as through the in-process simulator, for every built-in
// profile and a MIG-partitioned one. Only the PCIe root differs: the
// in-process sim resolves it, the library path reads sysfs (empty here).
func TestDiscoverMatchesInProcess(t *testing.T) {
	profiles := append(sim.Builtin(), staticMIG)
	require.Len(t, profiles, 9)
	for _, profile := range profiles {
		t.Run(profile, func(t *testing.T) {
			root := newRoot(t, profile)
			lib := open(t, root)
			got, err := discovery.Discover(ctx(t), lib, discovery.Options{SysfsRoot: t.TempDir()})
			require.NoError(t, err)

			want, _ := inProcess(t, inRootProfile(root, profile))
			require.NotEmpty(t, want.GPUs)
			// PCIe root, NUMA node and PCI IDs come from sysfs (empty
			// here), the in-process server knows them without it.
			for i := range want.GPUs {
				require.Empty(t, got.GPUs[i].PCIeRoot)
				require.Nil(t, got.GPUs[i].NUMANode)
				require.Zero(t, got.GPUs[i].PCIVendorID)
				require.Zero(t, got.GPUs[i].PCIDeviceID)
				want.GPUs[i].PCIeRoot, want.GPUs[i].NUMANode = "", nil
				want.GPUs[i].PCIVendorID, want.GPUs[i].PCIDeviceID = 0, 0
			}
			require.Equal(t, want, got)
		})
	}
}

// inRootProfile is what the library loads for profile: the copy in the
// root for a file (the name, and so the UUIDs, follow the file name).
func inRootProfile(root, profile string) string {
	if profile == staticMIG {
		return root + "/etc/gpudra-sim/profile.yaml"
	}
	return profile
}

// TestStaticMIGDevicesPresent guards the comparison above against a
// vacuous pass: the MIG profile does put MIG devices on the GPU.
func TestStaticMIGDevicesPresent(t *testing.T) {
	root := newRoot(t, staticMIG)
	lib := open(t, root)
	n, err := discovery.Discover(ctx(t), lib, discovery.Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	require.True(t, n.GPUs[0].MIGEnabled)
	require.Len(t, n.GPUs[0].MIGDevices, 4)
	for _, m := range n.GPUs[0].MIGDevices {
		d, ret := lib.DeviceGetHandleByUUID(m.UUID)
		ok(t, ret, m.UUID)
		isMIG, ret := d.IsMigDeviceHandle()
		ok(t, ret)
		require.True(t, isMIG)
		parent, ret := d.GetDeviceHandleFromMigDeviceHandle()
		ok(t, ret)
		uuid, ret := parent.GetUUID()
		ok(t, ret)
		require.Equal(t, n.GPUs[0].UUID, uuid)
	}
	v, ret := lib.SystemGetNVMLVersion()
	ok(t, ret)
	require.Regexp(t, `^\d+\.`+n.DriverVersion+`$`, v)
	_, ret = lib.DeviceGetHandleByIndex(len(n.GPUs))
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
}
