package computedomain

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/test/fakedriver"
)

func TestReadChannelsMajor(t *testing.T) {
	for _, tc := range []struct {
		name, devices string
		want          int
		wantErr       string
	}{
		{name: "as on a real H200 host",
			devices: "Character devices:\n  1 mem\n195 nvidia\n234 nvidia-uvm\n241 nvidia-nvswitch\n242 nvidia-caps-imex-channels\n" +
				"243 nvidia-caps\n\nBlock devices:\n  7 loop\n", want: 242},
		{name: "only in the block section", devices: "Character devices:\n195 nvidia\n\nBlock devices:\n242 nvidia-caps-imex-channels\n",
			wantErr: "lists no such character device nvidia-caps-imex-channels"},
		{name: "missing", devices: "Character devices:\n195 nvidia\n243 nvidia-caps\n", wantErr: "offers no IMEX channels"},
		{name: "a longer name is another device", devices: "Character devices:\n250 nvidia-caps-imex-channels-x\n",
			wantErr: "lists no such character device"},
		{name: "bad number", devices: "Character devices:\nx nvidia-caps-imex-channels\n", wantErr: `"x" is not a major number`},
		{name: "zero", devices: "Character devices:\n0 nvidia-caps-imex-channels\n", wantErr: `"0" is not a major number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "devices"), []byte(tc.devices), 0o444))
			got, err := ReadChannelsMajor(dir)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := ReadChannelsMajor(filepath.Join(t.TempDir(), "absent"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestChannelEditsOnFakeRoot(t *testing.T) {
	roots := fakeRoot(t)
	_, err := os.Stat(filepath.Join(roots.Dev, ChannelDir))
	require.ErrorIs(t, err, os.ErrNotExist, "a fake root, like a real host, starts without channel nodes")
	c, err := NewChannels(roots)
	require.NoError(t, err)
	require.Equal(t, fakedriver.IMEXChannelsMajor, c.Major)

	old := syscall.Umask(0o077) // the mode must not depend on the umask
	defer syscall.Umask(old)
	ctx := context.Background()
	edits, err := c.Edits(ctx, []int{0, 5})
	require.NoError(t, err)
	require.Len(t, edits.DeviceNodes, 2)
	for i, id := range []int{0, 5} {
		n := edits.DeviceNodes[i]
		assert.Equal(t, ChannelPath(id), n.Path)
		assert.Equal(t, "/run/nvidia/driver"+ChannelPath(id), n.HostPath, "the host's path of the node")
		assert.Equal(t, "c", n.Type)
		assert.Equal(t, int64(fakedriver.IMEXChannelsMajor), n.Major)
		assert.Equal(t, int64(id), n.Minor)
		require.NotNil(t, n.FileMode)
		assert.Equal(t, os.FileMode(0o666), *n.FileMode)

		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(roots.Dev, ChannelPath(id)), &st))
		assert.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT)
		assert.Equal(t, uint32(0o666), st.Mode&0o777)
		assert.Equal(t, fakedriver.IMEXChannelsMajor, int(unix.Major(st.Rdev)))
		assert.Equal(t, id, int(unix.Minor(st.Rdev)))
	}
	entries, err := os.ReadDir(filepath.Join(roots.Dev, ChannelDir))
	require.NoError(t, err)
	assert.Len(t, entries, 2, "only the channels asked for")

	// Idempotent: the same nodes, not made again.
	before, err := os.Stat(filepath.Join(roots.Dev, ChannelPath(5)))
	require.NoError(t, err)
	again, err := c.Edits(ctx, []int{5})
	require.NoError(t, err)
	assert.Equal(t, edits.DeviceNodes[1], again.DeviceNodes[0])
	after, err := os.Stat(filepath.Join(roots.Dev, ChannelPath(5)))
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "an existing node is kept")
}

func TestChannelEditsRefuseForeignNodes(t *testing.T) {
	roots := fakeRoot(t)
	c, err := NewChannels(roots)
	require.NoError(t, err)
	dir := filepath.Join(roots.Dev, ChannelDir)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "channel1"), []byte("x"), 0o644))
	require.NoError(t, syscall.Mknod(filepath.Join(dir, "channel2"), syscall.S_IFCHR|0o666, fakedriver.Mkdev(fakedriver.IMEXChannelsMajor, 7)))
	require.NoError(t, syscall.Mknod(filepath.Join(dir, "channel3"), syscall.S_IFCHR|0o666, fakedriver.Mkdev(fakedriver.CapsMajor, 3)))
	for _, tc := range []struct {
		id      int
		wantErr string
	}{
		{1, "is not a character device: remove it"},
		{2, "is device 123:7, but IMEX channel 2 is 123:2"},
		{3, "is device 122:3, but IMEX channel 3 is 123:3"},
		{-1, "channel numbers are between 0 and"},
		{MaxChannels, "channel numbers are between 0 and"},
	} {
		_, err := c.Edits(context.Background(), []int{0, tc.id})
		require.ErrorContains(t, err, tc.wantErr, "channel %d", tc.id)
	}
}

// On a host whose dev root is the host's own, the edits name no host path:
// CDI takes the container path for it.
func TestChannelEditsHostRoot(t *testing.T) {
	roots := fakeRoot(t)
	c := &Channels{Dev: roots.Dev, HostDev: "/", Major: fakedriver.IMEXChannelsMajor}
	edits, err := c.Edits(context.Background(), AllChannels(3))
	require.NoError(t, err)
	require.Len(t, edits.DeviceNodes, 3)
	for i, n := range edits.DeviceNodes {
		assert.Empty(t, n.HostPath)
		assert.True(t, strings.HasSuffix(n.Path, "/channel"+string(rune('0'+i))), n.Path)
	}
}
