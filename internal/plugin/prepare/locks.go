package prepare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/rawfile"
)

// deviceLocks are file locks (flock) in a directory that every plugin
// process of the node shares. During a rolling update the old and the new
// plugin run side by side and the kubelet may call either; the locks
// serialize work across both processes, and within one process across
// goroutines (each acquisition opens its own file description).
//
// There are two kinds, always taken in this order:
//   - a claim's lock (claims/<uid>.lock, which exists while the claim has a
//     record or someone holds the lock), held while anything of that claim is
//     prepared, unprepared or cleaned up, so a check like "this claim has no
//     record" stays true until the caller acts on it;
//   - the locks of the claim's devices (<device>.lock), in name order, so
//     claims that overlap cannot deadlock.
//
// A device lock is any valid device name, including one the node no longer
// has: the claims recorded on it must still be unprepared.
type deviceLocks struct {
	dir string
}

const claimLockDir = "claims"

func newDeviceLocks(dir string) (*deviceLocks, error) {
	if err := os.MkdirAll(filepath.Join(dir, claimLockDir), 0o700); err != nil {
		return nil, fmt.Errorf("create lock directory %s: %w", dir, err)
	}
	return &deviceLocks{dir: dir}, nil
}

// lock takes the locks of the named devices in sorted order and returns the
// function that releases them.
func (l *deviceLocks) lock(names []string) (func(), error) {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	for _, n := range sorted {
		if err := validateLockName(n); err != nil {
			return nil, err
		}
	}
	files := make([]*os.File, 0, len(sorted))
	unlock := func() {
		for i := len(files) - 1; i >= 0; i-- {
			_ = syscall.Flock(int(files[i].Fd()), syscall.LOCK_UN)
			_ = files[i].Close()
		}
	}
	for _, n := range sorted {
		f, err := openLocked(filepath.Join(l.dir, n+".lock"))
		if err != nil {
			unlock()
			return nil, fmt.Errorf("lock device %s: %w", n, err)
		}
		files = append(files, f)
	}
	return unlock, nil
}

// lockClaim takes a claim's lock. Its file is removed on release (before
// unlocking) when keep says the claim is gone, so that no file is left per
// claim: a waiter that then gets the lock of a removed file tries again, and
// no two holders ever hold "the" lock. A claim that stays prepared keeps its
// file, so its next operations find it.
func (l *deviceLocks) lockClaim(uid string, keep func() bool) (func(), error) {
	if err := model.ValidateUID(uid); err != nil {
		return nil, err
	}
	path := filepath.Join(l.dir, claimLockDir, uid+".lock")
	for {
		f, err := openLocked(path)
		if err != nil {
			return nil, fmt.Errorf("lock claim %s: %w", uid, err)
		}
		if sameFile(f, path) {
			return func() {
				if !keep() {
					_ = os.Remove(path)
				}
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		// The previous holder removed the file while we waited.
		_ = f.Close()
	}
}

// openLocked opens (creating) path and takes an exclusive flock on it.
func openLocked(path string) (*os.File, error) {
	f, err := rawfile.Open(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, err
		}
	}
}

// sameFile reports whether f is still the file at path.
func sameFile(f *os.File, path string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(path)
	return err == nil && os.SameFile(held, now)
}

// validateLockName keeps device names usable as file names.
func validateLockName(name string) error {
	ok := name != "" && len(name) <= 128
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("invalid device name %q: must be 1 to 128 lower-case letters, digits and '-'", name)
	}
	return nil
}
