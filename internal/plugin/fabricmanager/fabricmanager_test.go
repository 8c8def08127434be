package fabricmanager

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/test/fakedriver"
)

// open opens Fabric Manager of the shared fake root (the simulated libnvfm
// through go-nvfm, the socket of the root) as the plugin does.
func open(t *testing.T, env map[string]string) (*Manager, string) {
	t.Helper()
	root := fakedriver.FMRootForTest(t)
	_, ctx := ktesting.NewTestContext(t)
	m, err := Open(ctx, Options{DriverRoot: root, LockFile: filepath.Join(t.TempDir(), "fm.lock"), LookupEnv: lookup(env)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m, root
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestPartitions: the HGX 8-GPU table read through go-nvfm, by module.
func TestPartitions(t *testing.T) {
	m, _ := open(t, nil)
	require.Len(t, m.Partitions(), 15)
	assert.Equal(t, Partition{ID: 0, Modules: []int{1, 2, 3, 4, 5, 6, 7, 8}}, m.Partitions()[0])
	tests := []struct {
		module int
		want   map[int]int
	}{
		{1, map[int]int{8: 0, 4: 1, 2: 3, 1: 7}},
		{6, map[int]int{8: 0, 4: 2, 2: 6, 1: 12}},
		{9, map[int]int{}},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, m.BySize(tc.module), "module %d", tc.module)
	}
	for _, tc := range []struct {
		modules []int
		id      int
		ok      bool
	}{
		{[]int{3, 1}, 3, true}, {[]int{8, 7, 6, 5}, 2, true}, {[]int{4}, 10, true},
		{[]int{1, 2}, 0, false}, {[]int{1, 2, 3}, 0, false}, {nil, 0, false},
	} {
		id, ok := m.Find(tc.modules)
		assert.Equal(t, tc.ok, ok, "%v", tc.modules)
		assert.Equal(t, tc.id, id, "%v", tc.modules)
	}
}

// TestActivateDeactivate: each change only when the fabric differs, so an
// active partition is left and an inactive one is not deactivated (which
// FM answers UNINITIALIZED); what FM refuses is an error.
func TestActivateDeactivate(t *testing.T) {
	m, _ := open(t, nil)
	_, ctx := ktesting.NewTestContext(t)
	steps := []struct {
		name     string
		activate bool
		id       int
		changed  bool
		err      string
		active   []int
	}{
		{name: "activate", activate: true, id: 1, changed: true, active: []int{1}},
		{name: "already active", activate: true, id: 1, active: []int{1}},
		{name: "overlapping", activate: true, id: 0, err: "fmActivateFabricPartition(0): ", active: []int{1}},
		{name: "unknown", activate: true, id: 99, err: "offered no partition 99", active: []int{1}},
		{name: "another", activate: true, id: 5, changed: true, active: []int{1, 5}},
		{name: "deactivate", id: 1, changed: true, active: []int{5}},
		{name: "inactive", id: 1, active: []int{5}},
		{name: "deactivate the other", id: 5, changed: true},
	}
	for _, s := range steps {
		var changed bool
		var err error
		if s.activate {
			changed, err = m.Activate(ctx, s.id)
		} else {
			changed, err = m.Deactivate(ctx, s.id)
		}
		if s.err != "" {
			require.ErrorContains(t, err, s.err, s.name)
		} else {
			require.NoError(t, err, s.name)
		}
		assert.Equal(t, s.changed, changed, s.name)
		var active []int
		for _, p := range m.Partitions() {
			if on, err := m.Active(p.ID); assert.NoError(t, err) && on {
				active = append(active, p.ID)
			}
		}
		assert.Equal(t, s.active, active, s.name)
	}
}

// TestOpenFails: Open fails with what to fix, and leaves the library free
// for the next Open.
func TestOpenFails(t *testing.T) {
	root := fakedriver.FMRootForTest(t)
	tests := []struct {
		name  string
		opts  Options
		env   map[string]string
		wants []string
	}{
		{name: "no daemon at the socket", opts: Options{DriverRoot: root},
			env:   map[string]string{UnixSocketEnv: "/nonexistent/socket"},
			wants: []string{"unix socket /nonexistent/socket (" + UnixSocketEnv + ")", "CONNECTION_NOT_VALID", "FABRIC_MODE=1", "--fabric-manager-partitioning=false"}},
		{name: "TCP", opts: Options{DriverRoot: root}, env: map[string]string{AddressEnv: ""},
			wants: []string{"TCP " + DefaultAddress, "CONNECTION_NOT_VALID"}},
		{name: "no library", opts: Options{DriverRoot: t.TempDir()},
			wants: []string{"client library is missing", "libnvfm.so.1 or libnvfm.so"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tc.opts.LookupEnv = lookup(tc.env)
			_, err := Open(ctx, tc.opts)
			require.Error(t, err)
			for _, w := range tc.wants {
				assert.ErrorContains(t, err, w)
			}
			m, _ := open(t, nil)
			assert.Len(t, m.Partitions(), 15, "the next Open works")
		})
	}
}

// TestOneLibraryPerProcess: a second Manager shares the process's library
// object (a second go-nvfm object would get IN_USE from fmLibInit), each
// Close releases its own use, and another library path is refused while
// one is in use.
func TestOneLibraryPerProcess(t *testing.T) {
	first, root := open(t, nil)
	second, _ := open(t, nil)
	require.Same(t, first.lib, second.lib)
	other := nvfm.New(nvfm.WithLibraryPath(filepath.Join(root, fakedriver.LibDir, "libnvfm.so")))
	assert.Equal(t, nvfm.IN_USE, other.Init(), "a second object")
	require.NoError(t, second.Close())
	require.NoError(t, second.Close(), "twice is once")
	_, err := first.Active(0)
	require.NoError(t, err, "the first still works")

	copyPath := filepath.Join(t.TempDir(), "libnvfm.so.1")
	data, err := os.ReadFile(filepath.Join(root, fakedriver.LibDir, fakedriver.FMLibrarySONAME))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(copyPath, data, 0o755))
	_, ctx := ktesting.NewTestContext(t)
	_, err = Open(ctx, Options{DriverRoot: root, LibraryPath: copyPath})
	require.ErrorContains(t, err, "already uses Fabric Manager's library")
}
