package nvmllib

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tree builds a directory tree under a temp root. Entries ending in "/" are
// directories, "name -> target" are symbolic links, others are files.
func tree(t *testing.T, entries ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, e := range entries {
		name, target, isLink := strings.Cut(e, " -> ")
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case isLink:
			require.NoError(t, os.Symlink(target, p))
		case strings.HasSuffix(name, "/"):
			require.NoError(t, os.MkdirAll(p, 0o755))
		default:
			require.NoError(t, os.WriteFile(p, []byte("not really ELF"), 0o644))
		}
	}
	return root
}

func TestFindLibrary(t *testing.T) {
	const versioned = "libnvidia-ml.so.550.90.07"
	tests := []struct {
		name    string
		entries []string
		want    string // path inside the root; "" means not found
	}{
		{"debian layout with relative link",
			[]string{"usr/lib/x86_64-linux-gnu/" + versioned, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 -> " + versioned},
			"/usr/lib/x86_64-linux-gnu/" + versioned},
		{"absolute link resolved inside the root",
			[]string{"usr/lib64/" + versioned, "usr/lib64/libnvidia-ml.so.1 -> /usr/lib64/" + versioned},
			"/usr/lib64/" + versioned},
		{"merged /usr: lib64 is a link to usr/lib64",
			[]string{"usr/lib64/libnvidia-ml.so.1", "lib64 -> usr/lib64"},
			"/usr/lib64/libnvidia-ml.so.1"},
		{"search order: /usr/lib64 before /usr/lib",
			[]string{"usr/lib/libnvidia-ml.so.1", "usr/lib64/libnvidia-ml.so.1"},
			"/usr/lib64/libnvidia-ml.so.1"},
		{"aarch64", []string{"usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1"}, "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1"},
		{"container-installed driver", []string{"usr/local/nvidia/lib64/libnvidia-ml.so.1"}, "/usr/local/nvidia/lib64/libnvidia-ml.so.1"},
		{"dangling link is skipped",
			[]string{"usr/lib64/libnvidia-ml.so.1 -> " + versioned, "lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
			"/lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
		{"link escaping with .. stays in the root",
			[]string{"usr/lib64/libnvidia-ml.so.1 -> ../../../../../usr/lib/" + versioned, "usr/lib/" + versioned},
			"/usr/lib/" + versioned},
		{"a directory is not the library", []string{"usr/lib64/libnvidia-ml.so.1/"}, ""},
		{"empty root", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.entries...)
			got, err := FindLibrary(root)
			if tc.want == "" {
				require.ErrorIs(t, err, ErrLibraryNotFound)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(root, tc.want), got)
		})
	}
}

func TestFindLibraryNotFoundMessage(t *testing.T) {
	root := tree(t, "usr/lib/")
	_, err := FindLibrary(root)
	require.ErrorIs(t, err, ErrLibraryNotFound)
	for _, want := range []string{LibraryName, root, "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "--nvidia-driver-root", "make fake-driver-root", "/run/nvidia/driver"} {
		assert.Contains(t, err.Error(), want)
	}

	_, err = FindLibrary(filepath.Join(root, "missing"))
	require.ErrorIs(t, err, ErrLibraryNotFound)
	assert.Contains(t, err.Error(), "is not a directory")
}

func TestFindLibraryLinkLoop(t *testing.T) {
	root := tree(t, "usr/lib64/libnvidia-ml.so.1 -> libnvidia-ml.so.2", "usr/lib64/libnvidia-ml.so.2 -> libnvidia-ml.so.1")
	_, err := FindLibrary(root)
	require.ErrorIs(t, err, ErrLibraryNotFound)
	assert.Contains(t, err.Error(), "too many levels of symbolic links")

	_, err = resolveInRoot(root, "/usr/lib64/libnvidia-ml.so.1")
	assert.True(t, errors.Is(err, syscall.ELOOP))
}

func TestResolveInRoot(t *testing.T) {
	root := tree(t, "a/b/file", "link -> /a/b", "up -> ../../../a", "self -> .")
	for in, want := range map[string]string{
		"/a/b/file":             "/a/b/file",
		"/link/file":            "/a/b/file",
		"/up/b/file":            "/a/b/file",
		"/self/self/a/./b/file": "/a/b/file",
		"/../../a/b/../b/file":  "/a/b/file",
	} {
		got, err := resolveInRoot(root, in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

// TestFindInRoot: the first name found in the search directories, links
// resolved inside the root (an absolute link points into the root, not the
// host), and fs.ErrNotExist when none is there.
func TestFindInRoot(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		want    string // relative to the root; "" for not found
	}{
		{name: "versioned link", entries: []string{"usr/lib/x86_64-linux-gnu/libnvfm.so.1 -> libnvfm.so.580.1", "usr/lib/x86_64-linux-gnu/libnvfm.so.580.1"},
			want: "usr/lib/x86_64-linux-gnu/libnvfm.so.580.1"},
		{name: "absolute link stays in the root", entries: []string{"usr/lib64/libnvfm.so.1 -> /opt/fm/libnvfm.so.1", "opt/fm/libnvfm.so.1"},
			want: "opt/fm/libnvfm.so.1"},
		{name: "second name", entries: []string{"lib/libnvfm.so"}, want: "lib/libnvfm.so"},
		{name: "first name wins", entries: []string{"lib/libnvfm.so", "usr/local/nvidia/lib64/libnvfm.so.1"}, want: "usr/local/nvidia/lib64/libnvfm.so.1"},
		{name: "dangling link", entries: []string{"usr/lib64/libnvfm.so.1 -> missing"}},
		{name: "a directory", entries: []string{"usr/lib64/libnvfm.so.1/"}},
		{name: "none", entries: []string{"usr/lib64/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.entries...)
			got, err := FindInRoot(root, "libnvfm.so.1", "libnvfm.so")
			if tc.want == "" {
				require.ErrorIs(t, err, os.ErrNotExist)
				assert.ErrorContains(t, err, "libnvfm.so.1 or libnvfm.so")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(root, tc.want), got)
		})
	}
}
