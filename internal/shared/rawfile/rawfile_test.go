package rawfile

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name        string
		content     []byte
		size, limit int
		want        []byte
	}{
		{name: "empty", content: nil, size: 16, limit: 64, want: []byte{}},
		{name: "fits the first buffer", content: []byte("exclusive ns/a"), size: 64, limit: 64, want: []byte("exclusive ns/a")},
		{name: "grows past a small first buffer", content: bytes.Repeat([]byte("x"), 1000), size: 8, limit: 4096,
			want: bytes.Repeat([]byte("x"), 1000)},
		{name: "exactly the limit", content: bytes.Repeat([]byte("y"), 64), size: 16, limit: 64, want: bytes.Repeat([]byte("y"), 64)},
		{name: "over the limit: one byte past it", content: bytes.Repeat([]byte("z"), 200), size: 16, limit: 64,
			want: bytes.Repeat([]byte("z"), 65)},
		{name: "over the limit, first buffer larger", content: bytes.Repeat([]byte("w"), 200), size: 4096, limit: 64,
			want: bytes.Repeat([]byte("w"), 65)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			require.NoError(t, os.WriteFile(p, tc.content, 0o600))
			got, err := ReadFile(p, tc.size, tc.limit)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestErrorsAsOS(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")

	_, err := ReadFile(missing, 16, 16)
	require.ErrorIs(t, err, fs.ErrNotExist)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, missing, pe.Path)

	_, err = Open(missing, os.O_RDONLY, 0)
	require.ErrorIs(t, err, fs.ErrNotExist)

	f, err := Open(missing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	require.NoError(t, err)
	_, err = f.WriteString("data")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = Open(missing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	require.ErrorIs(t, err, fs.ErrExist)
	got, err := os.ReadFile(missing)
	require.NoError(t, err)
	require.Equal(t, "data", string(got))

	_, err = ReadFile(dir, 16, 16)
	require.Error(t, err, "a directory is not read as a file")
}

func TestRename(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.WriteFile(a, []byte("new"), 0o600))
	require.NoError(t, os.WriteFile(b, []byte("old"), 0o600))
	require.NoError(t, Rename(a, b))
	got, err := os.ReadFile(b)
	require.NoError(t, err)
	require.Equal(t, "new", string(got))
	require.NoFileExists(t, a)

	// A file never replaces a directory.
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o700))
	require.NoError(t, os.WriteFile(a, []byte("x"), 0o600))
	err = Rename(a, sub)
	var le *os.LinkError
	require.ErrorAs(t, err, &le)
	require.DirExists(t, sub)
	require.FileExists(t, a)
}

func TestOpenIsBlockingAndCloseOnExec(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := Open(p, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	defer f.Close()
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	require.NoError(t, err)
	require.NotZero(t, flags&unix.FD_CLOEXEC, "close-on-exec")
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.Zero(t, fl&unix.O_NONBLOCK, "blocking")
}
