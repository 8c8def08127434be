package vfio

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// mknod makes a character device under root, or skips without CAP_MKNOD.
func mknod(t *testing.T, root, p string, maj, min int) {
	t.Helper()
	here := filepath.Join(root, p)
	require.NoError(t, os.MkdirAll(filepath.Dir(here), 0o755))
	dev := uint64(maj&0xfff)<<8 | uint64(min&0xff) | uint64(min&^0xff)<<12
	if err := syscall.Mknod(here, syscall.S_IFCHR|0o600, int(dev)); errors.Is(err, syscall.EPERM) {
		t.Skip("creating device nodes needs root")
	} else {
		require.NoError(t, err)
	}
}

// TestDeviceNodesBackends: the nodes of a passed-through GPU for each IOMMU
// backend the claim asks for, with and without the API device, on a node
// with and without /dev/iommu, read from the node (the cdev from sysfs,
// the numbers from /dev), as NVIDIA's driver gives them.
func TestDeviceNodesBackends(t *testing.T) {
	const addr, group, cdev = "0000:1b:00.0", 41, "vfio5"
	for _, tc := range []struct {
		name          string
		prefer, iommu bool
		api           bool
		want          []string
		wantMinors    []int64
	}{
		{name: "legacy", want: []string{"/dev/vfio/41"}, wantMinors: []int64{41}},
		{name: "legacy, API device", api: true, want: []string{"/dev/vfio/41", "/dev/vfio/vfio"}, wantMinors: []int64{41, 196}},
		{name: "legacy on an iommufd node", iommu: true, want: []string{"/dev/vfio/41"}, wantMinors: []int64{41}},
		{name: "legacy on an iommufd node, API device", iommu: true, api: true,
			want: []string{"/dev/vfio/41", "/dev/vfio/vfio"}, wantMinors: []int64{41, 196}},
		{name: "PreferIommuFD without /dev/iommu", prefer: true, want: []string{"/dev/vfio/41"}, wantMinors: []int64{41}},
		{name: "PreferIommuFD without /dev/iommu, API device", prefer: true, api: true,
			want: []string{"/dev/vfio/41", "/dev/vfio/vfio"}, wantMinors: []int64{41, 196}},
		{name: "iommufd", prefer: true, iommu: true, want: []string{"/dev/vfio/devices/vfio5"}, wantMinors: []int64{5}},
		{name: "iommufd, API device", prefer: true, iommu: true, api: true,
			want: []string{"/dev/vfio/devices/vfio5", "/dev/iommu"}, wantMinors: []int64{5, 123}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, sys := t.TempDir(), t.TempDir()
			mknod(t, dev, GroupPath(group), 124, group)
			mknod(t, dev, ContainerPath, 10, 196)
			require.NoError(t, os.MkdirAll(filepath.Join(sys, "bus/pci/devices", addr, CDevSysfsDir, cdev), 0o755))
			if tc.iommu {
				mknod(t, dev, IOMMUPath, 10, 123)
				mknod(t, dev, CDevPath(cdev), 125, 5)
			}
			enabled, err := IOMMUFDEnabled(dev)
			require.NoError(t, err)
			require.Equal(t, tc.iommu, enabled)
			n, err := NodesFor(HostSysfs{Root: sys}, addr, group, tc.prefer && enabled, tc.api)
			require.NoError(t, err)
			nodes, err := DeviceNodes(dev, "/host", n)
			require.NoError(t, err)
			var paths []string
			var minors []int64
			for _, nd := range nodes {
				paths = append(paths, nd.Path)
				minors = append(minors, nd.Minor)
				require.Equal(t, "/host"+nd.Path, nd.HostPath)
			}
			require.Equal(t, tc.want, paths)
			require.Equal(t, tc.wantMinors, minors)
		})
	}
}

// TestNodesForWithoutCDev: the iommufd backend on a GPU whose sysfs lists
// no cdev (a kernel without CONFIG_VFIO_DEVICE_CDEV) fails, saying what to
// fix; the legacy backend does not need one.
func TestNodesForWithoutCDev(t *testing.T) {
	const addr = "0000:1b:00.0"
	for _, tc := range []struct {
		name    string
		entries []string
	}{
		{name: "no vfio-dev"},
		{name: "empty vfio-dev", entries: []string{}},
		{name: "no vfio<N> in it", entries: []string{"vfiox", "other3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			dir := filepath.Join(sys, "bus/pci/devices", addr)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			if tc.entries != nil {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, CDevSysfsDir), 0o755))
			}
			for _, e := range tc.entries {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, CDevSysfsDir, e), 0o755))
			}
			_, err := NodesFor(HostSysfs{Root: sys}, addr, 40, true, true)
			require.ErrorIs(t, err, ErrNoCDev)
			for _, want := range []string{addr, "vfio-dev/vfio<N>", "CONFIG_VFIO_DEVICE_CDEV", "LegacyOnly"} {
				require.ErrorContains(t, err, want)
			}
			n, err := NodesFor(HostSysfs{Root: sys}, addr, 40, false, true)
			require.NoError(t, err)
			require.Equal(t, []string{"/dev/vfio/40", ContainerPath}, n.Paths())
		})
	}
}
