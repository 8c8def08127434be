package fakedriver

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
)

// TestPassthroughOnRoot runs the plugin's rebinding code (internal/plugin/vfio)
// on a generated root through Kernel: every GPU starts on nvidia with a
// group of its own, moves to vfio-pci and back, and the kernel's refusals
// hold.
func TestPassthroughOnRoot(t *testing.T) {
	root := ForTest(t, "dgx-h100", "node-a")
	sys := vfio.HostSysfs{Root: filepath.Join(root, "sys")}
	entries, err := os.ReadDir(filepath.Join(root, "proc/driver/nvidia/gpus"))
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	var addrs []string
	for _, e := range entries {
		addrs = append(addrs, e.Name())
	}
	busy := map[string]bool{}
	k := &Kernel{Root: root, Busy: func(a string) bool { return busy[a] }}

	groups := map[int]bool{}
	for i, a := range addrs {
		d, err := sys.Driver(a)
		require.NoError(t, err)
		require.Equal(t, vfio.DriverNVIDIA, d, a)
		o, err := sys.Override(a)
		require.NoError(t, err)
		require.Empty(t, o, a)
		g, err := sys.IOMMUGroup(a)
		require.NoError(t, err)
		require.False(t, groups[g], "group %d shared", g)
		groups[g] = true
		require.Equal(t, IOMMUGroupBase+i, g)
		listed := filepath.Join(root, "sys/kernel/iommu_groups", filepath.Base(vfio.GroupPath(g)), "devices", a)
		require.FileExists(t, filepath.Join(listed, "driver_override"), "the group lists its device")
	}

	a := addrs[0]
	t.Run("bind while bound is EBUSY", func(t *testing.T) {
		require.Equal(t, syscall.EBUSY, Errno(k.Bind(a, vfio.DriverVFIO)))
	})
	t.Run("unbind from a driver it is not bound to is ENODEV", func(t *testing.T) {
		require.Equal(t, syscall.ENODEV, Errno(k.Unbind(a, vfio.DriverVFIO)))
	})
	t.Run("an unloaded driver has no bind file", func(t *testing.T) {
		require.Equal(t, syscall.ENOENT, Errno(k.Bind(a, "nouveau")))
	})
	t.Run("a busy GPU stays on nvidia", func(t *testing.T) {
		busy[a] = true
		defer delete(busy, a)
		require.ErrorContains(t, vfio.ToVFIO(context.Background(), k, a, nil), "still using it")
		d, _ := sys.Driver(a)
		require.Equal(t, vfio.DriverNVIDIA, d)
		o, _ := sys.Override(a)
		require.Empty(t, o)
	})
	t.Run("vfio-pci without an override is ENODEV", func(t *testing.T) {
		require.NoError(t, k.Unbind(a, vfio.DriverNVIDIA))
		require.Equal(t, syscall.ENODEV, Errno(k.Bind(a, vfio.DriverVFIO)))
		require.NoError(t, vfio.ToNVIDIA(context.Background(), k, a))
	})
	t.Run("round trip", func(t *testing.T) {
		require.NoError(t, vfio.ToVFIO(context.Background(), k, a, nil))
		d, _ := sys.Driver(a)
		require.Equal(t, vfio.DriverVFIO, d)
		require.FileExists(t, filepath.Join(root, "sys/bus/pci/drivers/vfio-pci", a, "driver_override"), "the driver links its device")
		require.NoFileExists(t, filepath.Join(root, "sys/bus/pci/drivers/nvidia", a))
		other, _ := sys.Driver(addrs[1])
		require.Equal(t, vfio.DriverNVIDIA, other, "other GPUs are untouched")

		g, _ := sys.IOMMUGroup(a)
		nodes, err := vfio.DeviceNodes(root, "/var/lib/gpudra-sim/driver-root", vfio.Nodes{Group: g, APIDevice: true})
		require.NoError(t, err)
		require.Len(t, nodes, 2)
		require.Equal(t, vfio.GroupPath(g), nodes[0].Path)
		require.Equal(t, int64(VFIOMajor), nodes[0].Major)
		require.Equal(t, int64(g), nodes[0].Minor)
		require.Equal(t, "/var/lib/gpudra-sim/driver-root"+vfio.GroupPath(g), nodes[0].HostPath)
		require.Equal(t, vfio.ContainerPath, nodes[1].Path)
		require.Equal(t, int64(VFIOContainerMinor), nodes[1].Minor)

		require.NoError(t, vfio.ToNVIDIA(context.Background(), k, a))
		d, _ = sys.Driver(a)
		require.Equal(t, vfio.DriverNVIDIA, d)
		o, _ := sys.Override(a)
		require.Empty(t, o)
	})
}
