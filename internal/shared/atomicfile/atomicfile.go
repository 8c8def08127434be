// Package atomicfile replaces files atomically and durably. It is the one
// place in gpudra that writes a file by "temp file, then rename": every
// persistent file (checkpoint records, the health state, the inventory of
// last known GPUs, time-slice markers, the simulator's state) goes through
// it, so they all get the same crash and power-loss guarantees.
//
// A write creates a temp file in the directory of the target, fills it,
// fsyncs and closes it, gives it its mode, renames it over the target and
// fsyncs the directory. A crash or power loss at any point leaves either the
// old file or the new one, never a torn one. A failure before the rename
// removes the temp file and leaves the old file untouched.
//
// # Temp files
//
// The temp file of a write to dir/name is named dir/.name.tmp-<random>
// (see IsTemp). A crash between its creation and the rename leaves it
// behind. A later write never reuses or renames it (each write picks a new
// random name) and never removes it either: in a directory shared by
// several writers, a temp file may belong to a write still in progress.
// Readers that list a directory must skip names for which IsTemp is true
// (every dot-prefixed name, in practice). The owner of a file, once it
// knows no write of its own is in progress (at startup), may call
// RemoveTemps to delete what crashed writes left.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/shared/rawfile"
)

// tempInfix separates the target's name from the random part of a temp
// file's name.
const tempInfix = ".tmp-"

// Sync says which fsyncs a write does.
type Sync uint8

const (
	// SyncAll fsyncs the temp file before the rename and the directory
	// after it: once the write returns, the new file survives a power
	// loss. WriteFile always uses it.
	SyncAll Sync = iota
	// SyncFile fsyncs the temp file but not the directory: after a power
	// loss the target holds the old content or the new one, complete, but
	// the rename itself may be lost.
	SyncFile
	// SyncNone does no fsync: the write is atomic against a crash of the
	// process (the kernel has the data) but not against a power loss. Only
	// for files that do not outlive a reboot, or test fixtures.
	SyncNone
)

// beforeRename, when set (by tests only), is called after the temp file is
// written, fsynced and closed and before it is renamed: a failpoint to
// crash the process there.
var beforeRename func(tmp string)

// WriteFile replaces path by a file with content data and mode perm (exactly
// perm: the umask does not apply), fsyncing the file and its directory.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, SyncAll, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path by a file with mode perm whose content fill writes,
// doing the fsyncs sync names. The writer fill gets is the temp file itself
// (an *os.File), so io.Copy into it can use the kernel's copy functions. If
// fill fails, the old file is left as it was and fill's error returned.
func Write(path string, perm os.FileMode, sync Sync, fill func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return fmt.Errorf("write %s atomically: the path names no file", path)
	}
	if dir == "" {
		dir = "."
	}
	f, err := createTemp(dir, base)
	if err != nil {
		return fmt.Errorf("write %s: create a temp file next to it: %w; check that the directory exists and is writable", path, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				_ = f.Close()
			}
			_ = os.Remove(tmp)
		}
	}()
	if err = fill(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if perm != tempMode {
		if err = f.Chmod(perm); err != nil {
			return fmt.Errorf("write %s: set mode %v: %w", path, perm, err)
		}
	}
	if sync != SyncNone {
		if err = f.Sync(); err != nil {
			return fmt.Errorf("write %s: fsync %s: %w", path, tmp, err)
		}
	}
	closed = true
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: close %s: %w", path, tmp, err)
	}
	if beforeRename != nil {
		beforeRename(tmp)
	}
	if err = rawfile.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: rename %s into place: %w", path, tmp, err)
	}
	if sync == SyncAll {
		// The new file is in place: a failure here only means the rename
		// might not survive a power loss, so nothing is removed.
		if err := SyncDir(dir); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// tempMode is the mode a temp file is created with.
const tempMode = 0o600

// createTemp creates a new temp file for dir/base, as os.CreateTemp does
// but with rawfile's system calls.
func createTemp(dir, base string) (*os.File, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, "."+base+tempInfix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := rawfile.Open(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, tempMode)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		return f, err
	}
}

// SyncDir fsyncs directory dir, so that the renames, creations and
// removals of files in it survive a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s for fsync: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("close directory %s: %w", dir, err)
	}
	return nil
}

// IsTemp reports whether a file name (not a path) is that of a temp file of
// this package: ".<name>.tmp-<random>".
func IsTemp(name string) bool {
	_, ok := tempTarget(name)
	return ok
}

// tempTarget returns the name of the file a temp file of this package was
// written for (".<name>.tmp-<random>" -> "<name>"), and false for any other
// name.
func tempTarget(name string) (string, bool) {
	i := strings.LastIndex(name, tempInfix)
	if !strings.HasPrefix(name, ".") || i < 1 {
		return "", false
	}
	return name[1:i], true
}

// RemoveTemps removes the temp files that interrupted writes to path left
// behind, and reports how many it removed. Only call it when no write to
// path can be in progress (its temp file would go too, and that write
// would fail). A missing directory is not an error.
func RemoveTemps(path string) (int, error) {
	dir, base := filepath.Split(path)
	return RemoveTempsIn(dir, func(target string) bool { return target == base })
}

// RemoveTempsIn removes, from directory dir, the temp files of interrupted
// writes to every file whose name match accepts, and reports how many it
// removed. The same caution as for RemoveTemps applies to each of those
// files. A missing directory is not an error.
func RemoveTempsIn(dir string, match func(target string) bool) (int, error) {
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list the temp files in %s: %w", dir, err)
	}
	n := 0
	for _, e := range entries {
		target, ok := tempTarget(e.Name())
		if !ok || !match(target) || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("remove the leftover temp file %s: %w; remove it by hand", p, err)
		}
		n++
	}
	return n, nil
}
