package fakedriver

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestForeignLibcBreaksLibraryPath: the root's tools are as demanding as the
// real ones. With the root's library directory on LD_LIBRARY_PATH (the
// host's C library under the image's loader) they fail to start; with no
// driver library reachable they fail; with only the root's libnvidia-ml.so.1
// preloaded, as NVIDIA starts nvidia-smi, they run.
func TestForeignLibcBreaksLibraryPath(t *testing.T) {
	root := ForTest(t, "l4", "node-a")
	smi := filepath.Join(root, BinDir, "nvidia-smi")
	libDir := filepath.Join(root, LibDir)
	run := func(env ...string) (string, error) {
		cmd := exec.Command(smi, "compute-policy", "-i", "GPU-00000000-0000-0000-0000-000000000000", "--get-timeslice")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("LD_LIBRARY_PATH=" + libDir)
	require.Error(t, err, "a tool with the host's lib dir on its library path started:\n%s", out)
	require.Regexp(t, `libc\.so\.6|GLIBC|symbol`, out)

	out, err = run()
	require.Error(t, err, "a tool without the driver's NVML started:\n%s", out)
	require.Contains(t, out, "cannot load libnvidia-ml.so.1")

	out, err = run("LD_PRELOAD=" + filepath.Join(libDir, NVMLSONAME))
	require.NoError(t, err, out)
}

// TestRootIsChrootable: a host-layout root is a system's, so its tools run
// chrooted into it (as NVIDIA runs the MPS control daemon), with the root's
// own C library found before the foreign one of its library directory and
// its libnvidia-ml.so.1 found by the root's loader.
func TestRootIsChrootable(t *testing.T) {
	root := ForTest(t, "l4", "node-a")
	cmd := exec.Command("chroot", root, "/"+BinDir+"/nvidia-smi", "compute-policy", "-i",
		"GPU-00000000-0000-0000-0000-000000000000", "--get-timeslice")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command("chroot", root, "/bin/sh", "-c", "echo chrooted").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, "chrooted\n", string(out))
}
