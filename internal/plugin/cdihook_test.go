package plugin

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/test/images"
)

// testHookSource writes a stand-in for the image's nvidia-cdi-hook whose
// content names version, and returns its path.
func testHookSource(t *testing.T, dir, version string) string {
	t.Helper()
	p := filepath.Join(dir, "image", "nvidia-cdi-hook")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n# "+version+"\nexit 0\n"), 0o755))
	return p
}

// hookPaths are the distinct paths of the hooks in the node's common edits.
func hookPaths(t *testing.T, o *Options) []string {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	gpus, err := OpenNode(ctx, o)
	require.NoError(t, err)
	defer gpus.Close()
	edits, err := gpus.Edits(ctx, o)
	require.NoError(t, err)
	common, err := edits.Common()
	require.NoError(t, err)
	seen := map[string]bool{}
	var paths []string
	for _, h := range common.Hooks {
		if !seen[h.Path] {
			seen[h.Path] = true
			paths = append(paths, h.Path)
		}
	}
	return paths
}

// With no --nvidia-cdi-hook-path the specs name the plugin's own copy of
// the image's hook in the plugin directory (mounted at the host's path),
// never nvcdi's default /usr/bin/nvidia-cdi-hook, which GPU Operator and
// GKE nodes do not have.
func TestCDIHookInstalledAndNamed(t *testing.T) {
	o := testOptions(t)
	installed := filepath.Join(o.PluginDataDir(), CDIHookFile)
	require.Equal(t, []string{installed}, hookPaths(t, o))
	fi, err := os.Stat(installed)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	want, err := os.ReadFile(o.NvidiaCDIHookSource)
	require.NoError(t, err)
	got, err := os.ReadFile(installed)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// An explicit --nvidia-cdi-hook-path wins and nothing is installed.
func TestCDIHookExplicitPathWins(t *testing.T) {
	o := testOptions(t)
	o.NvidiaCDIHookPath = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
	o.NvidiaCDIHookSource = filepath.Join(t.TempDir(), "missing")
	require.Equal(t, []string{o.NvidiaCDIHookPath}, hookPaths(t, o))
	require.NoFileExists(t, filepath.Join(o.PluginDataDir(), CDIHookFile))
}

func TestInstallCDIHook(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	dst := filepath.Join(dir, "plugin", CDIHookFile)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o750))

	// A missing source is an error that names both flags.
	_, err := installCDIHook(ctx, filepath.Join(dir, "nope"), dst)
	require.ErrorContains(t, err, "--nvidia-cdi-hook-source")
	require.ErrorContains(t, err, "--nvidia-cdi-hook-path")
	require.NoFileExists(t, dst)

	v1 := testHookSource(t, filepath.Join(dir, "v1"), "hook v1")
	_, err = installCDIHook(ctx, v1, dst)
	require.NoError(t, err)
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(dst, old, old))

	// The same content again: the file is left alone.
	_, err = installCDIHook(ctx, v1, dst)
	require.NoError(t, err)
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	require.True(t, fi.ModTime().Equal(old), "an up-to-date copy was rewritten")

	// An upgrade's image brings another hook: replaced by a new file (a
	// runtime may be running the old one), executable.
	before, err := os.Stat(dst)
	require.NoError(t, err)
	v2 := testHookSource(t, filepath.Join(dir, "v2"), "hook v2")
	_, err = installCDIHook(ctx, v2, dst)
	require.NoError(t, err)
	data, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.Contains(t, string(data), "hook v2")
	after, err := os.Stat(dst)
	require.NoError(t, err)
	require.False(t, os.SameFile(before, after), "the hook was rewritten in place")
	require.Equal(t, os.FileMode(0o755), after.Mode().Perm())

	// A copy whose mode was changed is repaired.
	require.NoError(t, os.Chmod(dst, 0o644))
	_, err = installCDIHook(ctx, v2, dst)
	require.NoError(t, err)
	after, err = os.Stat(dst)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), after.Mode().Perm())
}

// The flag's default is where the gpudra image carries the hook.
func TestCDIHookImagePath(t *testing.T) {
	require.Equal(t, images.GpudraCDIHook, CDIHookImagePath)
	require.Equal(t, images.CDIHookBinary, CDIHookFile)
}
