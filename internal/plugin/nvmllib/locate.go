package nvmllib

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// LibraryName is the NVML library the NVIDIA driver installs.
const LibraryName = "libnvidia-ml.so.1"

// LibrarySearchDirs are the directories, relative to the driver root, where
// FindLibrary looks for LibraryName, in order.
var LibrarySearchDirs = []string{
	"/usr/lib64",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib",
	"/lib64",
	"/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu",
	"/lib",
	"/usr/local/nvidia/lib64", // driver installed by a container, e.g. on GKE
}

// noGPUHint tells a user without GPUs what to do instead.
const noGPUHint = "or point --nvidia-driver-root at a simulated driver root (make fake-driver-root) to run without GPUs"

// ErrLibraryNotFound is returned (wrapped) when no NVML library is found.
var ErrLibraryNotFound = errors.New("NVML library not found")

// FindLibrary returns the host path of LibraryName under driverRoot ("/"
// when empty). Symbolic links are resolved as if driverRoot were the root
// directory, so an absolute link inside a containerized driver installation
// (/run/nvidia/driver) stays inside it.
func FindLibrary(driverRoot string) (string, error) {
	if driverRoot == "" {
		driverRoot = "/"
	}
	root, err := filepath.Abs(driverRoot)
	if err != nil {
		return "", fmt.Errorf("driver root %q: %w", driverRoot, err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: driver root %q is not a directory; set --nvidia-driver-root to where the NVIDIA driver is installed; %s",
			ErrLibraryNotFound, driverRoot, noGPUHint)
	}
	hostPath, problems := searchInRoot(root, LibraryName)
	if hostPath != "" {
		return hostPath, nil
	}
	msg := fmt.Sprintf("%s not found in %s under driver root %q", LibraryName, strings.Join(LibrarySearchDirs, ", "), driverRoot)
	if len(problems) > 0 {
		msg += " (" + strings.Join(problems, "; ") + ")"
	}
	return "", fmt.Errorf("%w: %s; set --nvidia-driver-root to where the NVIDIA driver is installed (\"/\" for a driver on the host, /run/nvidia/driver with the GPU Operator), %s",
		ErrLibraryNotFound, msg, noGPUHint)
}

// maxSymlinks bounds symbolic link resolution, like the kernel's limit.
const maxSymlinks = 40

// resolveInRoot resolves all symbolic links in p (an absolute path inside
// root) as if root were "/", and returns the resulting path inside root.
// ".." and absolute link targets never leave root.
func resolveInRoot(root, p string) (string, error) {
	resolved := "/"
	pending := strings.Split(p, "/")
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, c)
		hostPath := filepath.Join(root, next)
		fi, err := os.Lstat(hostPath)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", &fs.PathError{Op: "resolve", Path: hostPath, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(hostPath)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = "/"
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	return resolved, nil
}

// FindInRoot returns the host path of the first of names found in
// LibrarySearchDirs under driverRoot ("/" when empty), resolving symbolic
// links as FindLibrary does; for the driver's other libraries (Fabric
// Manager's libnvfm). The error wraps fs.ErrNotExist when none is there.
func FindInRoot(driverRoot string, names ...string) (string, error) {
	if driverRoot == "" {
		driverRoot = "/"
	}
	root, err := filepath.Abs(driverRoot)
	if err != nil {
		return "", fmt.Errorf("driver root %q: %w", driverRoot, err)
	}
	for _, name := range names {
		if hostPath, _ := searchInRoot(root, name); hostPath != "" {
			return hostPath, nil
		}
	}
	return "", fmt.Errorf("%w: %s in none of %s under driver root %q", fs.ErrNotExist, strings.Join(names, " or "),
		strings.Join(LibrarySearchDirs, ", "), driverRoot)
}

// searchInRoot looks for name in each of LibrarySearchDirs under root (an
// absolute host path), resolving symbolic links inside root, and returns
// the host path of the first regular file found ("" when none), with what
// went wrong resolving a directory other than its absence.
func searchInRoot(root, name string) (hostPath string, problems []string) {
	for _, dir := range LibrarySearchDirs {
		inRoot, err := resolveInRoot(root, path.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		hostPath := filepath.Join(root, inRoot)
		if fi, err := os.Stat(hostPath); err == nil && fi.Mode().IsRegular() {
			return hostPath, nil
		}
	}
	return "", problems
}
