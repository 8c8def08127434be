package fakedriver

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
	"github.com/gpudra/gpudra/test/repo"
)

// cdevOf is the GPU's cdev as sysfs lists it.
func cdevOf(t *testing.T, root, addr string) string {
	t.Helper()
	name, err := vfio.HostSysfs{Root: filepath.Join(root, "sys")}.CDev(addr)
	require.NoError(t, err)
	return name
}

// requireCDevNode checks dev/vfio/devices/<name>: CDevMajor, minor N.
func requireCDevNode(t *testing.T, root, name string, n int) {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(root, vfio.CDevPath(name)), &st))
	require.Equal(t, uint32(syscall.S_IFCHR), st.Mode&syscall.S_IFMT)
	require.Equal(t, CDevMajor, Major(st.Rdev))
	require.Equal(t, n, Minor(st.Rdev))
}

// TestKernelCDevs: on a root with dev/iommu the simulated kernel gives a
// GPU a VFIO cdev when vfio-pci binds it and takes it away at unbind,
// numbered at bind (lowest free from CDevBase: neither the IOMMU group nor
// the GPU's position); without dev/iommu it gives none.
func TestKernelCDevs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root")
	}
	ctx := context.Background()
	addrs := []string{"0000:1b:00.0", "0000:2c:00.0", "0000:3d:00.0"}
	t.Run("no iommufd", func(t *testing.T) {
		root := t.TempDir()
		require.NoError(t, PassthroughTree(root, addrs))
		k := &Kernel{Root: root}
		require.NoError(t, vfio.ToVFIO(ctx, k, addrs[0], nil))
		require.Empty(t, cdevOf(t, root, addrs[0]))
		require.NoDirExists(t, filepath.Join(root, vfio.CDevDir))
		require.NoError(t, vfio.ToNVIDIA(ctx, k, addrs[0]))
	})

	root := t.TempDir()
	require.NoError(t, PassthroughTree(root, addrs))
	require.NoError(t, EnableIOMMUFD(root))
	k := &Kernel{Root: root}
	for _, a := range addrs {
		require.Empty(t, cdevOf(t, root, a), "no cdev while on nvidia")
	}
	steps := []struct {
		name    string
		move    func() error
		want    map[string]string // address -> cdev ("" none)
		numbers map[string]int
	}{
		{name: "the last GPU bound first gets the first number", move: func() error { return vfio.ToVFIO(ctx, k, addrs[2], nil) },
			want: map[string]string{addrs[2]: "vfio100"}, numbers: map[string]int{"vfio100": 100}},
		{name: "the next bind the next", move: func() error { return vfio.ToVFIO(ctx, k, addrs[0], nil) },
			want: map[string]string{addrs[0]: "vfio101", addrs[2]: "vfio100"}, numbers: map[string]int{"vfio101": 101, "vfio100": 100}},
		{name: "unbind takes it away", move: func() error { return vfio.ToNVIDIA(ctx, k, addrs[2]) },
			want: map[string]string{addrs[0]: "vfio101"}, numbers: map[string]int{"vfio101": 101}},
		{name: "a freed number is given again", move: func() error { return vfio.ToVFIO(ctx, k, addrs[1], nil) },
			want: map[string]string{addrs[0]: "vfio101", addrs[1]: "vfio100"}, numbers: map[string]int{"vfio101": 101, "vfio100": 100}},
		{name: "a GPU bound again keeps none of its old one", move: func() error { return vfio.ToVFIO(ctx, k, addrs[2], nil) },
			want:    map[string]string{addrs[0]: "vfio101", addrs[1]: "vfio100", addrs[2]: "vfio102"},
			numbers: map[string]int{"vfio101": 101, "vfio100": 100, "vfio102": 102}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			require.NoError(t, st.move())
			for i, a := range addrs {
				name := cdevOf(t, root, a)
				require.Equal(t, st.want[a], name, a)
				if name == "" {
					require.NoDirExists(t, filepath.Join(root, "sys/bus/pci/devices", a, vfio.CDevSysfsDir))
					continue
				}
				group, err := k.IOMMUGroup(a)
				require.NoError(t, err)
				require.NotEqual(t, "vfio"+itoa(group), name, "not the group")
				require.NotEqual(t, "vfio"+itoa(i), name, "not the GPU's position")
				dev, err := os.ReadFile(filepath.Join(root, "sys/bus/pci/devices", a, vfio.CDevSysfsDir, name, "dev"))
				require.NoError(t, err)
				require.Equal(t, itoa(CDevMajor)+":"+itoa(st.numbers[name])+"\n", string(dev))
				requireCDevNode(t, root, name, st.numbers[name])
			}
			nodes, err := os.ReadDir(filepath.Join(root, vfio.CDevDir))
			require.NoError(t, err)
			require.Len(t, nodes, len(st.numbers), "one node per bound GPU, none left behind")
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestKernelWatcherCDev: on the local cluster's path (writes through
// vfio.HostSysfs, the watcher acting after them) the cdev is there once
// the bind shows, and gone once the GPU is back on nvidia.
func TestKernelWatcherCDev(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root")
	}
	root := t.TempDir()
	a := "0000:1b:00.0"
	require.NoError(t, PassthroughTree(root, []string{a}))
	require.NoError(t, EnableIOMMUFD(root))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := WatchKernel(ctx, &Kernel{Root: root})
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Stop()) }()
	sys := vfio.HostSysfs{Root: filepath.Join(root, "sys")}

	require.NoError(t, vfio.ToVFIO(ctx, sys, a, nil))
	require.Equal(t, "vfio100", cdevOf(t, root, a), "made before the driver link shows")
	requireCDevNode(t, root, "vfio100", 100)
	n, err := vfio.NodesFor(sys, a, IOMMUGroupBase, true, true)
	require.NoError(t, err)
	nodes, err := vfio.DeviceNodes(root, "", n)
	require.NoError(t, err)
	require.Equal(t, vfio.CDevPath("vfio100"), nodes[0].Path)
	require.Equal(t, int64(CDevMajor), nodes[0].Major)
	require.Equal(t, vfio.IOMMUPath, nodes[1].Path)
	require.Equal(t, int64(IOMMUMinor), nodes[1].Minor)

	require.NoError(t, vfio.ToNVIDIA(ctx, sys, a))
	require.Eventually(t, func() bool { return cdevOf(t, root, a) == "" }, 5*time.Second, 10*time.Millisecond)
	require.NoFileExists(t, filepath.Join(root, vfio.CDevPath("vfio100")))
}

// TestGenerateIOMMUFD: a profile with iommufd (the local cluster's
// IOMMUFDProfilePath) gives the root dev/iommu; one without has none.
func TestGenerateIOMMUFD(t *testing.T) {
	src, err := repo.Root()
	require.NoError(t, err)
	for profile, want := range map[string]bool{filepath.Join(src, IOMMUFDProfilePath): true, "l4": false} {
		root := ForTest(t, profile, "node-a")
		on, err := vfio.IOMMUFDEnabled(root)
		require.NoError(t, err)
		require.Equal(t, want, on, profile)
		if want {
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(filepath.Join(root, vfio.IOMMUPath), &st))
			require.Equal(t, VFIOMajor, Major(st.Rdev))
			require.Equal(t, IOMMUMinor, Minor(st.Rdev))
		}
	}
}
