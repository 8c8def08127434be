package computedomain

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// fakeRoot generates a fake driver root (test/fakedriver) in a temporary
// directory and returns its roots as the plugin would compute them. The
// simulated NVML library and tools are empty stand-ins: these tests read
// only the root's proc/devices and create device nodes, which needs root.
func fakeRoot(t *testing.T) nvmllib.Roots {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a fake driver root has device nodes and channels are created with mknod: run as root")
	}
	tools := t.TempDir()
	for _, tool := range fakedriver.Tools {
		require.NoError(t, os.WriteFile(filepath.Join(tools, tool), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	}
	lib := filepath.Join(tools, "libnvidia-ml-sim.so")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	root := filepath.Join(t.TempDir(), "driver-root")
	require.NoError(t, fakedriver.Generate(fakedriver.Options{Dir: root, Profile: "dgx-h100", Node: "node-a",
		NVMLLibrary: lib, ToolsDir: tools, Layout: "gke"}))
	roots := nvmllib.DriverRoots(root, "/run/nvidia/driver")
	require.Equal(t, root, roots.Dev, "the fake root has its own dev/")
	require.Equal(t, filepath.Join(root, "proc"), roots.Proc, "the fake root has its own proc/")
	return roots
}
