package fakegpu

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIMEXCtlArgs(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.cfg")
	require.NoError(t, os.WriteFile(cfg, []byte("IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\nIMEX_CMD_PORT="+fmt.Sprint(freePort(t))+"\n"), 0o644))
	off := filepath.Join(t.TempDir(), "off.cfg")
	require.NoError(t, os.WriteFile(off, []byte("IMEX_CMD_ENABLED=0\n"), 0o644))
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no request", []string{"-c", cfg}, 2, "one of -q and -N is required"},
		{"two requests", []string{"-q", "-N"}, 2, "only one of -q and -N"},
		{"not simulated", []string{"-c", cfg, "-n"}, 2, "does not simulate"},
		{"unknown", []string{"--frobnicate"}, 2, "unknown option"},
		{"-c without path", []string{"-q", "-c"}, 2, "-c needs"},
		{"no configuration", []string{"-c", filepath.Join(t.TempDir(), "none"), "-q"}, 1, "read the configuration"},
		{"command service off", []string{"-c", off, "-q"}, 1, "IMEX_CMD_ENABLED is not 1"},
		{"no daemon", []string{"-c", cfg, "-q"}, 1, "no answer from the IMEX daemon"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, tc.wantCode, IMEXCtl(tc.args, &out, &errOut), errOut.String())
			require.Contains(t, errOut.String(), tc.wantErr)
			require.Empty(t, out.String())
		})
	}
}

func TestIMEXConfigRefused(t *testing.T) {
	tests := []struct {
		name, config, wantErr string
	}{
		{"daemonizes", "IMEX_CMD_ENABLED=1\nIMEX_CMD_PORT=1\nIMEX_NODE_CONFIG_FILE=/n\n", "DAEMONIZE is not 0"},
		{"no command service", "DAEMONIZE=0\nIMEX_NODE_CONFIG_FILE=/n\n", "IMEX_CMD_ENABLED is not 1"},
		{"no node list", "DAEMONIZE=0\nIMEX_CMD_ENABLED=1\nIMEX_CMD_PORT=1\n", "IMEX_NODE_CONFIG_FILE is not set"},
		{"bad port", "DAEMONIZE=0\nSERVER_PORT=x\nIMEX_CMD_ENABLED=1\nIMEX_CMD_PORT=1\nIMEX_NODE_CONFIG_FILE=/n\n", "SERVER_PORT=\"x\" is not a port"},
		{"not key=value", "DAEMONIZE\n", "not key=value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.cfg")
			require.NoError(t, os.WriteFile(p, []byte(tc.config), 0o644))
			_, err := newIMEXDaemon(p, &bytes.Buffer{})
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// imexNode is one fake daemon of TestIMEXBinaries, bound to its own
// loopback address (127.0.0.1, 127.0.0.2, ...) and command port.
type imexNode struct {
	config string
	cmd    *exec.Cmd
}

func startIMEX(t *testing.T, bin, ip string, serverPort int, nodes string) *imexNode {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("DAEMONIZE=0\nLOG_FILE_NAME=\nBIND_INTERFACE_IP=%s\nSERVER_PORT=%d\nIMEX_NODE_CONFIG_FILE=%s\nIMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\nIMEX_CMD_PORT=%d\n",
		ip, serverPort, nodes, freePort(t))
	n := &imexNode{config: filepath.Join(dir, "config.cfg")}
	require.NoError(t, os.WriteFile(n.config, []byte(cfg), 0o644))
	n.cmd = exec.Command(bin, "-c", n.config)
	n.cmd.Stderr = os.Stderr
	require.NoError(t, n.cmd.Start())
	t.Cleanup(func() { _ = n.cmd.Process.Kill(); _ = n.cmd.Wait() })
	return n
}

func (n *imexNode) ctl(t *testing.T, ctl string, flag string) string {
	out, err := exec.Command(ctl, "-c", n.config, flag).Output()
	if err != nil {
		return "error: " + err.Error()
	}
	return string(out)
}

// TestIMEXBinaries: two fake daemons with one node list become READY once
// both answer; a listed peer that is absent keeps a daemon UNAVAILABLE, and
// so does an empty list; SIGUSR1 makes a daemon read its list again;
// SIGTERM ends it with status 0.
func TestIMEXBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 on this host's loopback: %v", err)
	}
	_ = l.Close()
	bins := t.TempDir()
	imex, ctl := filepath.Join(bins, "nvidia-imex"), filepath.Join(bins, "nvidia-imex-ctl")
	for bin, pkg := range map[string]string{imex: "gpudra-fake-imex", ctl: "gpudra-fake-imex-ctl"} {
		out, err := exec.Command("go", "build", "-o", bin, "github.com/gpudra/gpudra/test/cmd/"+pkg).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	port := freePort(t)
	nodes := filepath.Join(t.TempDir(), "nodes.cfg")
	require.NoError(t, os.WriteFile(nodes, []byte("127.0.0.1\n127.0.0.2\n"), 0o644))

	a := startIMEX(t, imex, "127.0.0.1", port, nodes)
	require.Eventually(t, func() bool { return a.ctl(t, ctl, "-q") == "UNAVAILABLE\n" }, 10*time.Second, 50*time.Millisecond)
	time.Sleep(3 * imexRound)
	require.Equal(t, "UNAVAILABLE\n", a.ctl(t, ctl, "-q"), "ready with a listed peer absent")
	require.Equal(t, "127.0.0.1 CONNECTED\n127.0.0.2 UNREACHABLE\n", a.ctl(t, ctl, "-N"))

	b := startIMEX(t, imex, "127.0.0.2", port, nodes)
	for _, n := range []*imexNode{a, b} {
		require.Eventually(t, func() bool { return n.ctl(t, ctl, "-q") == "READY\n" }, 10*time.Second, 50*time.Millisecond)
	}

	// A third node in the list, not started: both become UNAVAILABLE once
	// they read the list again.
	require.NoError(t, os.WriteFile(nodes, []byte("127.0.0.1\n127.0.0.2\n127.0.0.3\n"), 0o644))
	time.Sleep(3 * imexRound)
	require.Equal(t, "READY\n", a.ctl(t, ctl, "-q"), "the list is read at start and on SIGUSR1 only")
	for _, n := range []*imexNode{a, b} {
		require.NoError(t, n.cmd.Process.Signal(syscall.SIGUSR1))
		require.Eventually(t, func() bool { return n.ctl(t, ctl, "-q") == "UNAVAILABLE\n" }, 10*time.Second, 50*time.Millisecond)
	}

	// An empty list is never ready.
	require.NoError(t, os.WriteFile(nodes, nil, 0o644))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGUSR1))
	time.Sleep(3 * imexRound)
	require.Equal(t, "UNAVAILABLE\n", a.ctl(t, ctl, "-q"))
	require.Empty(t, strings.TrimSpace(a.ctl(t, ctl, "-N")))

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, b.cmd.Wait())
}
