package fakedriver

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
)

// A root of a node whose GPUs are in an NVLink clique (the GB200 tray) has
// the driver's fabric-imex-mgmt capability, as the node side's reader
// (computedomain.ReadFabricMgmt) expects it; a root without a clique has
// none.
func TestFabricIMEXMgmt(t *testing.T) {
	requireRoot(t)
	opts := testInputs(t, "gb200-nvl72-tray")
	require.NoError(t, Generate(opts))
	node, err := computedomain.ReadFabricMgmt(filepath.Join(opts.Dir, "proc"), opts.Dir)
	require.NoError(t, err)
	require.Equal(t, "/dev/nvidia-caps/nvidia-cap4000", node.Path)
	require.Equal(t, int64(CapsMajor), node.Major)
	require.Equal(t, int64(FabricIMEXMgmtMinor), node.Minor)
	require.Equal(t, filepath.Join(opts.Dir, node.Path), node.HostPath)
	requireCharDevice(t, node.HostPath, CapsMajor, FabricIMEXMgmtMinor)

	opts = testInputs(t, "dgx-h100")
	require.NoError(t, Generate(opts))
	_, err = computedomain.ReadFabricMgmt(filepath.Join(opts.Dir, "proc"), opts.Dir)
	require.ErrorIs(t, err, fs.ErrNotExist, "no clique, no capability")
	require.NoFileExists(t, filepath.Join(opts.Dir, "dev/nvidia-caps/nvidia-cap4000"))
}
