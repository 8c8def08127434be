// Package cshared builds the simulators' C shared libraries (the simulated
// libnvidia-ml and libnvfm; test-only, never shipped) with the go command,
// as the Makefile's sim-* targets do, and holds the checks their tests make
// that the two builds agree.
package cshared

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/repo"
)

// Build compiles the main package pkg with -buildmode=c-shared and ldflags
// into the file out; what names the library in errors. It runs the go
// command (from PATH, with a C compiler for cgo) inside this module, with
// the environment and env added. The C header the build writes next to out
// is removed.
func Build(ctx context.Context, what, pkg, ldflags, out string, env ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building %s needs the go command in PATH: %w", what, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags="+ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), env...)
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s (%s): %w\n%s", what, pkg, err, o)
	}
	_ = os.Remove(strings.TrimSuffix(out, ".so") + ".h")
	return nil
}

// CheckMakefile fails t unless the Makefile builds the package in dir
// (as the Makefile names it, e.g. ./test/fmsim/lib) c-shared with ldflags.
func CheckMakefile(t testing.TB, dir, ldflags string) {
	t.Helper()
	root, err := repo.Root()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\t\$\(GO\) build -buildmode=c-shared -trimpath -ldflags "([^"]*)" .*` + regexp.QuoteMeta(dir) + `$`).FindSubmatch(data)
	require.NotNil(t, m, "the Makefile has no c-shared build of %s", dir)
	require.Equal(t, ldflags, string(m[1]))
}

// CheckSONAME builds a library with build and fails t unless its SONAME is
// soname: ldconfig indexes the library by it. Skipped with -short.
func CheckSONAME(t *testing.T, build func(ctx context.Context, out string) error, soname string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the library")
	}
	out := filepath.Join(t.TempDir(), "lib.so")
	require.NoError(t, build(t.Context(), out))
	f, err := elf.Open(out)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	sonames, err := f.DynString(elf.DT_SONAME)
	require.NoError(t, err)
	require.Equal(t, []string{soname}, sonames)
}
