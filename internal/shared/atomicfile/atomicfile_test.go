package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// dirNames lists dir's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestWrite(t *testing.T) {
	errFill := errors.New("fill failed")
	for _, tc := range []struct {
		name string
		old  *string // content of the target before the write; nil: none
		perm os.FileMode
		sync Sync
		fill func(io.Writer) error
		// want is the target's content after the write; wantErr, if set,
		// is a substring of the error, and then the old file must be intact.
		want    string
		wantErr string
	}{
		{name: "new file", perm: 0o600, fill: text("hello"), want: "hello"},
		{name: "new file, mode 0644", perm: 0o644, fill: text("x"), want: "x"},
		{name: "new executable", perm: 0o755, fill: text("#!/bin/sh\n"), want: "#!/bin/sh\n"},
		{name: "empty file", perm: 0o600, fill: text(""), want: ""},
		{name: "replaces", old: ptr("old content, longer"), perm: 0o600, fill: text("new"), want: "new"},
		{name: "replaces, SyncFile", old: ptr("old"), perm: 0o640, sync: SyncFile, fill: text("new"), want: "new"},
		{name: "replaces, SyncNone", old: ptr("old"), perm: 0o600, sync: SyncNone, fill: text("new"), want: "new"},
		{name: "streamed", perm: 0o600, fill: func(w io.Writer) error {
			for range 3 {
				if _, err := io.WriteString(w, "ab"); err != nil {
					return err
				}
			}
			return nil
		}, want: "ababab"},
		{name: "fill fails after writing", old: ptr("old"), perm: 0o600, fill: func(w io.Writer) error {
			_, _ = io.WriteString(w, "half")
			return errFill
		}, wantErr: "fill failed"},
		{name: "fill fails, no old file", perm: 0o600, fill: func(io.Writer) error { return errFill }, wantErr: "fill failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			if tc.old != nil {
				require.NoError(t, os.WriteFile(path, []byte(*tc.old), 0o600))
			}
			err := Write(path, tc.perm, tc.sync, tc.fill)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorIs(t, err, errFill)
				require.ErrorContains(t, err, path, "the error names the file")
				if tc.old == nil {
					require.NoFileExists(t, path)
					require.Empty(t, dirNames(t, dir), "no temp file is left")
				} else {
					b, rerr := os.ReadFile(path)
					require.NoError(t, rerr)
					require.Equal(t, *tc.old, string(b), "the old file is intact")
					require.Equal(t, []string{"state.json"}, dirNames(t, dir), "no temp file is left")
				}
				return
			}
			require.NoError(t, err)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(b))
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, tc.perm, fi.Mode().Perm(), "the mode is exactly perm, whatever the umask")
			require.Equal(t, []string{"state.json"}, dirNames(t, dir), "no temp file is left")
		})
	}
}

func text(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func ptr[T any](v T) *T { return &v }

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, WriteFile(path, []byte("one"), 0o644))
	require.NoError(t, WriteFile(path, []byte("two"), 0o600))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "two", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "a replacement takes the new mode")
}

func TestWriteFileFailures(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "no-such-dir", "f")
		err := WriteFile(path, []byte("x"), 0o600)
		require.ErrorIs(t, err, fs.ErrNotExist)
		require.ErrorContains(t, err, path)
	})
	t.Run("read-only directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes into read-only directories")
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
		require.NoError(t, os.Chmod(dir, 0o500))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
		err := WriteFile(path, []byte("new"), 0o600)
		require.ErrorIs(t, err, fs.ErrPermission)
		b, rerr := os.ReadFile(path)
		require.NoError(t, rerr)
		require.Equal(t, "old", string(b))
	})
	t.Run("rename fails: the target is a directory", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		require.NoError(t, os.Mkdir(path, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(path, "inside"), []byte("old"), 0o600))
		err := WriteFile(path, []byte("new"), 0o600)
		require.ErrorContains(t, err, "rename")
		require.ErrorContains(t, err, path)
		require.Equal(t, []string{"f"}, dirNames(t, dir), "the temp file is removed")
		b, rerr := os.ReadFile(filepath.Join(path, "inside"))
		require.NoError(t, rerr)
		require.Equal(t, "old", string(b))
	})
	t.Run("path names no file", func(t *testing.T) {
		require.Error(t, WriteFile(t.TempDir()+"/", []byte("x"), 0o600))
	})
}

// crashEnv makes TestCrashBeforeRename's child process write the file it
// names and exit in the middle.
const crashEnv = "ATOMICFILE_TEST_CRASH_PATH"

const crashExitCode = 3

// TestCrashBeforeRename kills a process between the fsync of the temp file
// and the rename (a real exit, so no deferred cleanup runs), then checks
// that the old file is intact, that the leftover temp file is recognizable,
// that later writes work and leave it alone, and that RemoveTemps clears it.
func TestCrashBeforeRename(t *testing.T) {
	if path := os.Getenv(crashEnv); path != "" {
		beforeRename = func(string) { os.Exit(crashExitCode) }
		_ = WriteFile(path, []byte("new"), 0o600)
		t.Fatal("WriteFile returned instead of crashing")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	require.NoError(t, WriteFile(path, []byte("old"), 0o600))

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBeforeRename$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child must crash: %s", out)
	require.Equal(t, crashExitCode, exit.ExitCode(), "%s", out)

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old", string(b), "the crash leaves the old file")
	names := dirNames(t, dir)
	require.Len(t, names, 2, "the target and the crashed write's temp file: %v", names)
	var leftover string
	for _, n := range names {
		if n != "state.json" {
			leftover = n
		}
	}
	require.True(t, IsTemp(leftover), "readers can recognize and skip %q", leftover)
	require.True(t, strings.HasPrefix(leftover, ".state.json.tmp-"), leftover)
	b, err = os.ReadFile(filepath.Join(dir, leftover))
	require.NoError(t, err)
	require.Equal(t, "new", string(b), "the temp file was complete and fsynced")

	// A later write succeeds and leaves the leftover alone (it cannot tell
	// it from a write in progress).
	require.NoError(t, WriteFile(path, []byte("newer"), 0o600))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "newer", string(b))
	require.ElementsMatch(t, []string{"state.json", leftover}, dirNames(t, dir))

	// The owner removes it; other files' temps are not its business.
	other := filepath.Join(dir, ".other.json.tmp-123")
	require.NoError(t, os.WriteFile(other, nil, 0o600))
	n, err := RemoveTemps(path)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.ElementsMatch(t, []string{"state.json", ".other.json.tmp-123"}, dirNames(t, dir))
}

func TestIsTemp(t *testing.T) {
	for name, want := range map[string]bool{
		".state.json.tmp-123": true,
		".x.tmp-":             true,
		"state.json":          false,
		"state.json.tmp-1":    false, // not hidden: never one of ours
		".state.json":         false,
		"timeslice.gpu-0":     false,
	} {
		require.Equal(t, want, IsTemp(name), name)
	}
}

func TestRemoveTempsMissingDir(t *testing.T) {
	n, err := RemoveTemps(filepath.Join(t.TempDir(), "none", "f"))
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestSyncDirError(t *testing.T) {
	err := SyncDir(filepath.Join(t.TempDir(), "none"))
	require.ErrorIs(t, err, syscall.ENOENT)
}
