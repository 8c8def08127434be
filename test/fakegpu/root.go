package fakegpu

import (
	"fmt"
	"os"
	"path/filepath"
)

// RootStateDir is the directory, relative to a fake driver root <R> (see
// test/fakedriver), that holds the mutable state of a simulated node: the
// simulated NVML library's files and what the fake tools were told.
const RootStateDir = "var/lib/gpudra-sim"

// executable is os.Executable, else (no /proc, as in a chroot into a fake
// root, whose proc holds only the driver's files) the absolute path the
// tool was started by; tests replace it.
var executable = func() (string, error) {
	exe, err := os.Executable()
	if err != nil && len(os.Args) > 0 && filepath.IsAbs(os.Args[0]) {
		return os.Args[0], nil
	}
	return exe, err
}

// StateDir returns the directory where the fake tools record their state:
// $GPUDRA_FAKE_GPU_STATE_DIR when it is set, otherwise <R>/var/lib/gpudra-sim
// when the running tool is installed as <R>/usr/bin/<tool> in a fake driver
// root that has that directory.
func StateDir() (string, error) {
	if dir := os.Getenv(StateDirEnv); dir != "" {
		return dir, nil
	}
	exe, err := executable()
	if err != nil {
		return "", fmt.Errorf("$%s is not set and the path of this executable is unknown: %w", StateDirEnv, err)
	}
	if dir, ok := rootStateDir(exe); ok {
		return dir, nil
	}
	return "", fmt.Errorf("$%s is not set and %s is not installed as <root>/usr/bin/<tool> of a fake driver root with a %s directory: set $%s or generate a root with `make fake-driver-root`",
		StateDirEnv, exe, RootStateDir, StateDirEnv)
}

// rootStateDir returns <R>/var/lib/gpudra-sim for an executable at
// <R>/usr/bin/<tool> (a host's layout) or <R>/bin/<tool> (GKE's), if that
// directory exists.
func rootStateDir(exe string) (string, bool) {
	bin := filepath.Dir(filepath.Clean(exe))
	if filepath.Base(bin) != "bin" {
		return "", false
	}
	root := filepath.Dir(bin)
	if filepath.Base(root) == "usr" {
		if _, ok := rootStateDirOf(filepath.Dir(root)); ok {
			root = filepath.Dir(root)
		}
	}
	return rootStateDirOf(root)
}

func rootStateDirOf(root string) (string, bool) {
	dir := filepath.Join(root, RootStateDir)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", false
	}
	return dir, true
}
