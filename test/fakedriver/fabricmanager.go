package fakedriver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpudra/gpudra/test/fmsim"
	"github.com/gpudra/gpudra/test/sim"
)

// FMLibrarySONAME is the name the driver installs Fabric Manager's client
// library under; libnvfm.so, where NVIDIA's DRA driver looks for it in the
// driver root, is a link to it.
const FMLibrarySONAME = fmsim.SONAME

// fabricManager installs the simulated Fabric Manager of a profile that runs
// one: the simulated libnvfm (libnvfm.so.1 and the libnvfm.so link) beside
// libnvidia-ml and the running daemon's unix socket (fmsim.SocketPath). The
// fabric's state (fmsim.StatePath) is left as it is. A profile without
// Fabric Manager gets neither: connecting then fails as on a node where
// nvidia-fabricmanager is not running.
func (w *writer) fabricManager(layout Layout, mode sim.FabricManagerMode, library string) {
	if mode == sim.FabricManagerNone {
		return
	}
	w.copyFile(library, filepath.Join(layout.LibDir, FMLibrarySONAME), 0o755)
	w.symlink(FMLibrarySONAME, filepath.Join(layout.LibDir, "libnvfm.so"))
	w.mkdir(filepath.Dir(fmsim.SocketPath))
	if w.err != nil {
		return
	}
	// A socket inode, as the daemon's listening socket leaves it; mknod
	// needs no bind, so the root's path may be longer than a sockaddr's.
	path := w.path(fmsim.SocketPath)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.fail(err)
		return
	}
	if err := syscall.Mknod(path, syscall.S_IFSOCK|0o666, 0); err != nil {
		w.fail(fmt.Errorf("simulated Fabric Manager socket %s: %w", path, err))
	}
}

// checkFMLibrary checks the simulated libnvfm a profile with Fabric Manager
// needs.
func checkFMLibrary(mode sim.FabricManagerMode, library string) error {
	if mode == sim.FabricManagerNone {
		return nil
	}
	if library == "" {
		return fmt.Errorf("the profile runs Fabric Manager (%s) but no simulated libnvfm is given: set --fm-library (build it with `make sim-fm-lib`)", mode)
	}
	if fi, err := os.Stat(library); err != nil {
		return fmt.Errorf("simulated libnvfm (build it with `make sim-fm-lib`): %w", err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("simulated libnvfm %s is not a regular file", library)
	}
	return nil
}
