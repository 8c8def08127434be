// Package libtest tests the built simulated libnvfm through NVIDIA's go-nvfm,
// the path the plugin takes: dlopen, the C calls, the C structs.
package libtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/fmsim"
	"github.com/gpudra/gpudra/test/nvmlsim"
	"github.com/gpudra/gpudra/test/repo"
)

const (
	node   = "node-a"
	libDir = "usr/lib/x86_64-linux-gnu"
)

// libPath is the library built for this test binary.
var libPath string

// libEnv hands a child test process the library its parent built.
const libEnv = "FMSIM_LIBTEST_LIB"

func TestMain(m *testing.M) {
	if p := os.Getenv(libEnv); p != "" {
		libPath = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "fmsim-libtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	libPath = filepath.Join(dir, "libnvfm-sim.so")
	if err := fmsim.Build(context.Background(), libPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// newRoot makes a fake driver root whose profile is dgx-h100 with Fabric
// Manager in mode ("" for none), the library linked in as libnvfm.so.
func newRoot(t *testing.T, mode string) string {
	t.Helper()
	src, err := repo.Root()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(src, "test/sim/profiles/dgx-h100.yaml"))
	require.NoError(t, err)
	profile := strings.Replace(string(data), "name: dgx-h100", "name: dgx-h100-fm", 1)
	if mode != "" {
		profile += "fabricManager: " + mode + "\n"
	}
	// A short root: a unix socket path has at most 107 bytes.
	root, err := os.MkdirTemp("", "fm")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/gpudra-sim"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/gpudra-sim/profile.yaml"), []byte(profile), 0o644))
	require.NoError(t, nvmlsim.WriteConfig(root, nvmlsim.Config{Profile: "etc/gpudra-sim/profile.yaml", Node: node}))
	require.NoError(t, os.MkdirAll(filepath.Join(root, libDir), 0o755))
	require.NoError(t, os.Symlink(libPath, filepath.Join(root, libDir, "libnvfm.so")))
	return root
}

// startDaemon makes the simulated nvidia-fabricmanager of root answer: its
// unix socket exists (and listens) until the test ends or stop is called.
func startDaemon(t *testing.T, root string) (socket string, stop func()) {
	t.Helper()
	socket = filepath.Join(root, fmsim.SocketPath)
	require.NoError(t, os.MkdirAll(filepath.Dir(socket), 0o755))
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	stop = func() { _ = l.Close() }
	t.Cleanup(stop)
	return socket, stop
}

// open initializes go-nvfm on root's library; the test's cleanup shuts it
// down.
func open(t *testing.T, root string) nvfm.Interface {
	t.Helper()
	t.Setenv(nvmlsim.RootEnv, root)
	lib := nvfm.New(nvfm.WithLibraryPath(filepath.Join(root, libDir, "libnvfm.so")))
	require.Equal(t, nvfm.SUCCESS, lib.Init())
	t.Cleanup(func() { require.Equal(t, nvfm.SUCCESS, lib.Shutdown()) })
	return lib
}

// connect connects to the daemon on socket; the test's cleanup disconnects.
func connect(t *testing.T, lib nvfm.Interface, socket string) nvfm.Handle {
	t.Helper()
	h, ret := lib.Connect(nvfm.WithUnixSocket(socket))
	require.Equal(t, nvfm.SUCCESS, ret)
	t.Cleanup(func() { _ = h.Disconnect() })
	return h
}
