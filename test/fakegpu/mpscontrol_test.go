package fakegpu

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

// TestMPSControlBinary checks that the fake behaves like the real
// nvidia-cuda-mps-control where the plugin's logic depends on it: the
// daemon answers queries on its control socket; a second daemon on the same
// pipe directory is refused; a daemon outlives the removal of its pipe
// directory; a killed one leaves its socket behind, and clients then fail;
// "quit" stops it and removes the socket.
func TestMPSControlBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "gpudra-fake-mps-control")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/gpudra/gpudra/test/cmd/gpudra-fake-mps-control").CombinedOutput()
	require.NoError(t, err, string(out))
	// A deep directory: the socket path is longer than a unix address holds.
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), "12345678-0000-0000-0000-000000000001")
	pipe, logDir := filepath.Join(dir, "pipe"), filepath.Join(dir, "log")
	preload, err := nvmlsim.ToolEnv() // it needs libnvidia-ml, like the real tool
	require.NoError(t, err)
	env := append(append(os.Environ(), preload...), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+logDir, "CUDA_VISIBLE_DEVICES=GPU-a")

	client := func(cmds string) (string, error) {
		cmd := exec.Command(bin)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(cmds)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	startDaemon := func() *exec.Cmd {
		cmd := exec.Command(bin, "-f")
		cmd.Env = env
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		require.Eventually(t, func() bool {
			out, err := client("get_default_active_thread_percentage\n")
			return err == nil && out == "100.0\n"
		}, 10*time.Second, 10*time.Millisecond)
		return cmd
	}

	d := startDaemon()
	answer, err := client("set_default_active_thread_percentage 30\nget_default_active_thread_percentage\nget_server_list\n")
	require.NoError(t, err)
	require.Equal(t, "30.0\n", answer)
	pidFile, err := os.ReadFile(filepath.Join(pipe, ControlPIDFile))
	require.NoError(t, err)
	require.Equal(t, d.Process.Pid, atoi(t, pidFile))

	second := exec.Command(bin, "-f")
	second.Env = env
	out2, err := second.CombinedOutput()
	require.Error(t, err, "a second daemon on the same pipe directory is refused")
	require.Contains(t, string(out2), "already runs")

	// Killed: the socket stays, clients fail as with no daemon.
	require.NoError(t, d.Process.Signal(syscall.SIGKILL))
	_ = d.Wait()
	require.FileExists(t, filepath.Join(pipe, ControlSocket))
	answer, err = client("get_default_active_thread_percentage\n")
	require.Error(t, err)
	require.Contains(t, answer, "Cannot find MPS control daemon process")

	// A new daemon replaces the leftover socket; it survives the removal of
	// its directory (unreachable from then on).
	d = startDaemon()
	require.NoError(t, os.RemoveAll(dir))
	time.Sleep(700 * time.Millisecond)
	require.NoError(t, d.Process.Signal(syscall.Signal(0)), "still running without its directory")
	require.NoError(t, d.Process.Kill())
	_ = d.Wait()

	d = startDaemon()
	_, err = client("quit\n")
	require.NoError(t, err)
	require.NoError(t, d.Wait())
	require.NoFileExists(t, filepath.Join(pipe, ControlSocket))
	require.NoFileExists(t, filepath.Join(pipe, ControlPIDFile))
	log, err := os.ReadFile(filepath.Join(logDir, ControlLog))
	require.NoError(t, err)
	require.Contains(t, string(log), "Shutdown")
}

func atoi(t *testing.T, b []byte) int {
	t.Helper()
	var n int
	for _, c := range bytes.TrimSpace(b) {
		require.True(t, c >= '0' && c <= '9', string(b))
		n = n*10 + int(c-'0')
	}
	return n
}
