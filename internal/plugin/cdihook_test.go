package plugin

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
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

// A hook of NVIDIA's real size (several MiB) is compared and copied a block
// at a time: installing it allocates a small fraction of its size. Reading
// it whole (source and installed copy) left both in the idle plugin's RSS.
func TestInstallCDIHookStreams(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	const size = 8 << 20
	big := make([]byte, size)
	for i := range big {
		big[i] = byte(i * 7)
	}
	src := filepath.Join(dir, "hook")
	require.NoError(t, os.WriteFile(src, big, 0o755))
	dst := filepath.Join(dir, "plugin", CDIHookFile)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o750))

	allocated := func(install func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		install()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	for _, step := range []string{"copy", "compare equal"} {
		got := allocated(func() {
			_, err := installCDIHook(ctx, src, dst)
			require.NoError(t, err)
		})
		require.Less(t, got, uint64(size/8), "%s: installing an %d MiB hook allocated %d bytes", step, size>>20, got)
	}
	data, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, data), "the installed hook differs from its source")
}

// installed compares the whole content, not only the size: a copy of the
// same length that differs in any block (the last one included) is replaced.
func TestInstalledComparesContent(t *testing.T) {
	dir := t.TempDir()
	const size = 3*64<<10 + 100 // three full blocks and a short one
	src := filepath.Join(dir, "src")
	base := bytes.Repeat([]byte{'a'}, size)
	require.NoError(t, os.WriteFile(src, base, 0o755))
	write := func(data []byte, perm os.FileMode) func(string) {
		return func(p string) {
			require.NoError(t, os.WriteFile(p, data, perm))
			require.NoError(t, os.Chmod(p, perm)) // os.WriteFile's mode is subject to the umask
		}
	}
	for _, tc := range []struct {
		name string
		dst  func(p string)
		want bool
	}{
		{"missing", func(string) {}, false},
		{"identical", write(base, 0o755), true},
		{"not executable", write(base, 0o644), false},
		{"shorter", write(base[:size-1], 0o755), false},
		{"empty", write(nil, 0o755), false},
		{"first byte differs", write(changed(base, 0), 0o755), false},
		{"second block differs", write(changed(base, 64<<10), 0o755), false},
		{"last byte differs", write(changed(base, size-1), 0o755), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "dst")
			tc.dst(dst)
			f, err := os.Open(src)
			require.NoError(t, err)
			defer func() { _ = f.Close() }()
			got, err := installed(f, dst)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func changed(b []byte, at int) []byte {
	c := bytes.Clone(b)
	c[at] = 'b'
	return c
}

// The flag's default is where the gpudra image carries the hook.
func TestCDIHookImagePath(t *testing.T) {
	require.Equal(t, images.GpudraCDIHook, CDIHookImagePath)
	require.Equal(t, images.CDIHookBinary, CDIHookFile)
}
