package prepare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// deviceLocks are per-device file locks (flock) in a directory that every
// plugin process of the node shares. During a rolling update the old and the
// new plugin run side by side and the kubelet may call either; the locks
// serialize work on a device across both processes, and within one process
// across goroutines (each acquisition opens its own file description).
type deviceLocks struct {
	dir   string
	known map[string]bool
}

func newDeviceLocks(dir string, devices []string) (*deviceLocks, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create lock directory %s: %w", dir, err)
	}
	l := &deviceLocks{dir: dir, known: map[string]bool{}}
	for _, d := range devices {
		l.known[d] = true
	}
	return l, nil
}

// lock takes the locks of the named devices in sorted order (so claims that
// overlap cannot deadlock) and returns the function that releases them.
func (l *deviceLocks) lock(names []string) (func(), error) {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	for _, n := range sorted {
		if !l.known[n] {
			return nil, fmt.Errorf("device %q is not a GPU of this node; it may have been removed since the claim was allocated: %w", n, ErrUnknownDevice)
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
		f, err := os.OpenFile(filepath.Join(l.dir, n+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			unlock()
			return nil, fmt.Errorf("open lock of %s: %w", n, err)
		}
		if err := flock(f); err != nil {
			_ = f.Close()
			unlock()
			return nil, fmt.Errorf("lock %s: %w", n, err)
		}
		files = append(files, f)
	}
	return unlock, nil
}

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
