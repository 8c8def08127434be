// Package cshtest holds the checks the simulators' tests make that a
// library's build in cshared and the Makefile's sim-* target agree. It is
// apart from cshared because the libraries link cshared and must not link
// testing or testify (they would map their pages into every process that
// loads the simulated libnvidia-ml).
package cshtest

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/repo"
)

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

// notLinked are packages a simulated library must not link: a library that
// imports testing, testify or net/http (which testify brings) maps their
// code into every process that loads it, the plugin's included, and
// initialises them there.
var notLinked = regexp.MustCompile(`^(testing|testing/.*|github\.com/stretchr/testify(/.*)?|net/http(/.*)?)$`)

// CheckDeps fails t if the library's main package pkg links a package
// notLinked names (go list -deps, with this module's build).
func CheckDeps(t testing.TB, pkg string) {
	t.Helper()
	root, err := repo.Root()
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %s", pkg)
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		if notLinked.MatchString(p) {
			bad = append(bad, p)
		}
	}
	require.Empty(t, bad, "%s links packages a library loaded into the plugin must not link", pkg)
}
