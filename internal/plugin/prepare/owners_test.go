package prepare

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
)

// Every device of a multi-GPU claim gets its holder; a holder that cannot be
// written on one device fails the prepare and rolls the others back (no
// holder, record or CDI spec left), and the claim prepares once the cause
// is gone.
func TestHoldersOfMultiGPUClaim(t *testing.T) {
	devices := []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"}
	for _, tc := range []struct {
		name    string
		blocked string // device whose holder directory is a dangling symlink
	}{
		{name: "all written"},
		{name: "one device fails", blocked: "gpu-5"},
		{name: "the first device fails", blocked: "gpu-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 8)
			m, _ := e.manager()
			c := gpuClaim(uidA, "eight", devices...)
			if tc.blocked != "" {
				held := filepath.Join(m.cfg.Checkpoints.Dir(), "holders")
				require.NoError(t, os.MkdirAll(held, 0o700))
				blocker := filepath.Join(held, tc.blocked)
				// Read as no holders (the conflict check passes), but no
				// directory can be made there.
				require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "gone"), blocker))
				_, err := m.Prepare(ctx(t), c)
				require.ErrorContains(t, err, "add holder of "+tc.blocked)
				for _, d := range devices {
					require.Empty(t, m.holders(d), "holder of %s after the failed prepare", d)
				}
				rec, err := m.cfg.Checkpoints.Get(uidA)
				require.NoError(t, err)
				require.Nil(t, rec, "rolled back")
				require.NoFileExists(t, filepath.Join(e.cdiDir, cdi.SpecName(uidA)+".json"))
				require.NoError(t, os.Remove(blocker))
			}
			devs, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.Len(t, devs, len(devices))
			for _, d := range devices {
				require.Equal(t, []string{uidA}, m.holders(d), d)
			}
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			for _, d := range devices {
				require.Empty(t, m.holders(d), d)
			}
		})
	}
}
