package fakedriver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpudra/gpudra/test/fmsim"
	"github.com/gpudra/gpudra/test/repo"
)

// FMProfileName is the profile of FMRootForTest: dgx-h100 with Fabric
// Manager in shared NVSwitch mode, the local cluster's profile of that
// name (FMProfilePath, in the repository).
const (
	FMProfileName = "dgx-h100-fm"
	FMProfilePath = "test/localcluster/profiles/" + FMProfileName + ".yaml"
)

// FMNode is the node of FMRootForTest.
const FMNode = "node-a"

var (
	fmRootOnce sync.Once
	fmRoot     string
	fmRootErr  error
)

// FMRootForTest is a fake driver root of FMProfileName whose simulated
// nvidia-fabricmanager runs (its socket exists), shared by every test of
// the process: the simulated libnvfm is a Go c-shared library, and a
// process must load one copy of it only (go-nvfm dlopens the root's
// libnvfm.so; copies in several roots would be several libraries). Each
// call deactivates every partition (the fabric's state file removed) and
// points the simulated libraries at the root (RootEnv) for the test. The
// root is removed by a later test process (its directory names this one's
// PID). It must run as root, like ForTest.
func FMRootForTest(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a fake driver root has device nodes: run the tests as root")
	}
	fmRootOnce.Do(func() { fmRoot, fmRootErr = makeFMRoot() })
	if fmRootErr != nil {
		t.Fatalf("fake driver root with Fabric Manager: %v", fmRootErr)
	}
	if err := os.Remove(filepath.Join(fmRoot, fmsim.StatePath)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	t.Setenv(RootEnv, fmRoot)
	return fmRoot
}

func makeFMRoot() (string, error) {
	dir, err := Build()
	if err != nil {
		return "", err
	}
	lib := filepath.Join(dir, fmsim.SONAME+".sim")
	if err := fmsim.Build(context.Background(), lib+"."+strconv.Itoa(os.Getpid())); err != nil {
		return "", err
	}
	if err := os.Rename(lib+"."+strconv.Itoa(os.Getpid()), lib); err != nil {
		return "", err
	}
	removeStaleFMRoots(dir)
	work := filepath.Join(dir, "fmroot-"+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	src, err := repo.Root()
	if err != nil {
		return "", err
	}
	profilePath := filepath.Join(src, FMProfilePath)
	root := filepath.Join(work, "root")
	if err := Generate(Options{Dir: root, Profile: profilePath, Node: FMNode, NVMLLibrary: Library(dir), FMLibrary: lib, ToolsDir: dir}); err != nil {
		return "", fmt.Errorf("generate: %w", err)
	}
	return root, nil
}

// removeStaleFMRoots removes the roots of test processes that are gone.
func removeStaleFMRoots(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		pid, ok := strings.CutPrefix(e.Name(), "fmroot-")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n == os.Getpid() {
			continue
		}
		if err := syscall.Kill(n, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}
