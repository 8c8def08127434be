package fakedriver

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
)

// A root of a node whose GPUs are in a multi-node NVLink fabric (the GB200
// tray) has the driver's fabric-imex-mgmt capability, as the node side's
// reader (computedomain.ReadFabricMgmt) expects it, also while the
// fabric's registration is in progress; a root without such a fabric has
// none.
func TestFabricIMEXMgmt(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		profile string
		want    bool
	}{
		{"gb200-nvl72-tray", true},
		{"../localcluster/profiles/gb200-tray-fabric-pending.yaml", true},
		{"dgx-h100", false},
	} {
		t.Run(filepath.Base(tc.profile), func(t *testing.T) {
			opts := testInputs(t, tc.profile)
			require.NoError(t, Generate(opts))
			node, err := computedomain.ReadFabricMgmt(filepath.Join(opts.Dir, "proc"), opts.Dir)
			if !tc.want {
				require.ErrorIs(t, err, fs.ErrNotExist, "no fabric, no capability")
				require.NoFileExists(t, filepath.Join(opts.Dir, "dev/nvidia-caps/nvidia-cap4000"))
				return
			}
			require.NoError(t, err)
			require.Equal(t, "/dev/nvidia-caps/nvidia-cap4000", node.Path)
			require.Equal(t, int64(CapsMajor), node.Major)
			require.Equal(t, int64(FabricIMEXMgmtMinor), node.Minor)
			require.Equal(t, filepath.Join(opts.Dir, node.Path), node.HostPath)
			requireCharDevice(t, node.HostPath, CapsMajor, FabricIMEXMgmtMinor)
		})
	}
}
