package fmsim

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/repo"
)

// The Makefile's sim-fm-lib builds the library with Build's flags.
func TestMakefileBuildsLikeBuild(t *testing.T) {
	root, err := repo.Root()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\t\$\(GO\) build -buildmode=c-shared -trimpath -ldflags "([^"]*)" .*\./test/fmsim/lib$`).FindSubmatch(data)
	require.NotNil(t, m, "the Makefile has no sim-fm-lib build of ./test/fmsim/lib")
	require.Equal(t, LDFlags, string(m[1]))
}

// The built library has the real one's SONAME: ldconfig indexes it by it.
func TestBuildSONAME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the library")
	}
	out := filepath.Join(t.TempDir(), "libnvfm.so")
	require.NoError(t, Build(t.Context(), out))
	f, err := elf.Open(out)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	sonames, err := f.DynString(elf.DT_SONAME)
	require.NoError(t, err)
	require.Equal(t, []string{SONAME}, sonames)
}
