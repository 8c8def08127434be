// Package rawfile opens and reads small local files with as few system
// calls as the kernel needs. The prepare path of the kubelet plugin opens
// a dozen files per claim (locks, records, holders); os.OpenFile spends four
// more calls on each trying to register a regular file with Go's network
// poller, which always refuses it (epoll does not take regular files), and
// os.ReadFile adds an fstat to size its buffer. The files opened here are
// blocking, as os.OpenFile leaves regular files too.
package rawfile

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path like os.OpenFile (flag from the os package or unix,
// close-on-exec always), without the poller registration.
func Open(path string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := open(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

func open(path string, flag int, perm fs.FileMode) (int, error) {
	for {
		fd, err := unix.Open(path, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.EINTR) {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// ReadFile reads the file at path whole, like os.ReadFile, but at most
// limit bytes: a longer file yields its first limit+1 bytes, so the caller
// can tell it was cut. size is the buffer to start with.
func ReadFile(path string, size, limit int) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a close error loses nothing
	buf := make([]byte, 0, min(size, limit+1))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return buf, nil
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):min(cap(buf), limit+1)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// Rename renames oldpath to newpath with one rename(2). os.Rename first
// looks up newpath to refuse replacing a directory; rename(2) refuses that
// itself when oldpath is a file (EISDIR), which is all this package's
// callers rename.
func Rename(oldpath, newpath string) error {
	if err := unix.Rename(oldpath, newpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}
