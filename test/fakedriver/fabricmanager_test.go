package fakedriver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/fmsim"
	"github.com/gpudra/gpudra/test/sim"
)

// TestGenerateFabricManager: a profile that runs Fabric Manager gets the
// simulated libnvfm (libnvfm.so.1 and the libnvfm.so link NVIDIA's driver
// looks for) and the daemon's socket, which the simulated library takes for
// a running daemon; a refresh keeps the fabric's state; without the library
// Generate refuses; a profile without Fabric Manager gets neither.
func TestGenerateFabricManager(t *testing.T) {
	requireRoot(t)
	data, err := os.ReadFile(filepath.Join("..", "sim", "profiles", "dgx-h100.yaml"))
	require.NoError(t, err)
	profile := filepath.Join(t.TempDir(), "dgx-h100-fm.yaml")
	require.NoError(t, os.WriteFile(profile, []byte(strings.Replace(string(data), "name: dgx-h100",
		"name: dgx-h100-fm\nfabricManager: "+string(sim.FabricManagerSharedNVSwitch), 1)), 0o644))

	opts := testInputs(t, profile)
	err = Generate(opts)
	require.ErrorContains(t, err, "make sim-fm-lib")

	opts.FMLibrary = filepath.Join(t.TempDir(), "libnvfm-sim.so")
	require.NoError(t, os.WriteFile(opts.FMLibrary, stubELF(fmsim.SONAME), 0o755))
	require.NoError(t, Generate(opts))
	got, err := os.ReadFile(filepath.Join(opts.Dir, LibDir, "libnvfm.so"))
	require.NoError(t, err)
	assert.Equal(t, stubELF(fmsim.SONAME), got)
	target, err := os.Readlink(filepath.Join(opts.Dir, LibDir, "libnvfm.so"))
	require.NoError(t, err)
	assert.Equal(t, FMLibrarySONAME, target)
	socket := filepath.Join(opts.Dir, fmsim.SocketPath)
	fi, err := os.Stat(socket)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSocket, "a socket")
	assert.Equal(t, nvfm.SUCCESS, fmsim.Reachable(socket, true))

	state := filepath.Join(opts.Dir, fmsim.StatePath)
	require.NoError(t, fmsim.UpdateState(state, func(s *fmsim.State) bool { s.Active = []int{1}; return true }))
	require.NoError(t, Generate(opts))
	s, err := fmsim.ReadState(state)
	require.NoError(t, err)
	assert.Equal(t, []int{1}, s.Active, "kept across a refresh")
	assert.Equal(t, nvfm.SUCCESS, fmsim.Reachable(socket, true), "recreated")

	plain := testInputs(t, "dgx-h100")
	require.NoError(t, Generate(plain))
	assert.NoFileExists(t, filepath.Join(plain.Dir, LibDir, "libnvfm.so"))
	assert.Equal(t, nvfm.CONNECTION_NOT_VALID, fmsim.Reachable(filepath.Join(plain.Dir, fmsim.SocketPath), true))
}
