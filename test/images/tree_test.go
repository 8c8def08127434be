package images

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTreeEntries(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"bin", "lib/x86_64-linux-gnu", "lib64", "usr/share/doc/bash", "etc"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin/bash"), []byte("bash"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/share/doc/bash/copyright"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, ".packages"), []byte("bash\n"), 0o644))
	require.NoError(t, os.Symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", filepath.Join(root, "lib64/ld-linux-x86-64.so.2")))

	entries, err := TreeEntries(root)
	require.NoError(t, err)
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Path] = e
	}
	assert.Equal(t, HostFile("/bin/bash", filepath.Join(root, "bin/bash"), 0o755), got["/bin/bash"])
	assert.Equal(t, HostFile("/etc/ld.so.conf", filepath.Join(root, "etc/ld.so.conf"), 0o644), got["/etc/ld.so.conf"])
	assert.Equal(t, Link("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"), got["/lib64/ld-linux-x86-64.so.2"])
	assert.Equal(t, Directory("/lib/x86_64-linux-gnu", 0o755), got["/lib/x86_64-linux-gnu"])
	assert.Contains(t, got, "/usr/share")
	assert.NotContains(t, got, "/usr/share/doc", "documentation is left out")
	assert.NotContains(t, got, "/usr/share/doc/bash/copyright")
	assert.NotContains(t, got, "/.packages", "the Makefile's stamp is left out")

	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644))
	_, err = TreeEntries(root)
	assert.ErrorContains(t, err, "not a file, directory or symbolic link")
}
