package fakegpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Files of the fake MPS control daemon, named as the real one names them.
const (
	// ControlSocket is the unix socket in the pipe directory that clients
	// connect to. A daemon that died without "quit" leaves it behind, and a
	// connection to it is then refused, as with the real daemon.
	ControlSocket = "control"
	// ControlPIDFile, in the pipe directory, holds the daemon's PID (in the
	// daemon's own PID namespace) while it runs.
	ControlPIDFile = "nvidia-cuda-mps-control.pid"
	// ControlLog is the daemon's log in the log directory, as with the real one.
	ControlLog = "control.log"
	// MPSStateFile, in the log directory, holds the daemon's settings as JSON
	// (MPSState) after every command, for tests.
	MPSStateFile = "fake-mps-state.json"
	// QuitDelayEnv, for tests, makes the daemon keep running and answering
	// for this long (a Go duration) after "quit", as a real daemon does while
	// its MPS servers wait for their clients to finish.
	QuitDelayEnv = "GPUDRA_FAKE_MPS_QUIT_DELAY"
)

// clientTimeout bounds a client's wait for the daemon's answer; a daemon
// that accepts but never answers (stopped, hung) fails the client.
const clientTimeout = 10 * time.Second

// MPSState is what the fake daemon has been told.
type MPSState struct {
	PID int `json:"pid"`
	// Devices are the daemon's CUDA_VISIBLE_DEVICES.
	Devices []string `json:"devices"`
	// ActiveThreadPercentage is 0 until set.
	ActiveThreadPercentage int `json:"activeThreadPercentage,omitempty"`
	// PinnedMemLimits maps a device ordinal to the limit as given ("10240M").
	PinnedMemLimits map[string]string `json:"pinnedMemLimits,omitempty"`
}

// ReadMPSState reads the state file of a daemon's log directory.
func ReadMPSState(logDir string) (*MPSState, error) {
	b, err := os.ReadFile(filepath.Join(logDir, MPSStateFile))
	if err != nil {
		return nil, err
	}
	var s MPSState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", MPSStateFile, err)
	}
	return &s, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// MPSControl runs the fake nvidia-cuda-mps-control: "-f" serves as the
// control daemon until "quit"; no arguments sends the commands read from
// stdin to the daemon, one connection each, and prints its answers.
// Directories come from CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY
// as with the real tool; their defaults are the real tool's, or mps/pipe and
// mps/log in the state directory when there is one (StateDir: a tool
// installed in a fake driver root).
//
// Like the real daemon, it keeps running when its pipe directory is removed
// (nobody can reach it any more) and leaves its socket behind when it is
// killed: a plugin that removes a live daemon's directory, or that takes a
// leftover socket for a live daemon, is caught here as on a GPU node.
func MPSControl(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	pipeDir, logDir := mpsDirs()
	switch {
	case len(args) == 0:
		return mpsClient(pipeDir, stdin, stdout, stderr)
	case len(args) == 1 && args[0] == "-f":
		if err := mpsDaemon(pipeDir, logDir, stdout); err != nil {
			_, _ = fmt.Fprintln(stderr, "fake MPS control daemon:", err)
			return 1
		}
		return 0
	default:
		_, _ = fmt.Fprintf(stderr, "fake nvidia-cuda-mps-control: only -f (foreground daemon) and the client mode are simulated, got %q\n",
			strings.Join(args, " "))
		return 2
	}
}

// mpsDirs returns the pipe and log directories of MPSControl.
func mpsDirs() (pipeDir, logDir string) {
	pipeDir, logDir = "/tmp/nvidia-mps", "/var/log/nvidia-mps"
	if state, err := StateDir(); err == nil {
		pipeDir, logDir = filepath.Join(state, "mps", "pipe"), filepath.Join(state, "mps", "log")
	}
	return envOr("CUDA_MPS_PIPE_DIRECTORY", pipeDir), envOr("CUDA_MPS_LOG_DIRECTORY", logDir)
}

// socketPath returns a path to name in dir that fits a unix socket address
// (108 bytes): deep simulated roots (a test's temporary directory, the local
// cluster's kubelet root) go through the directory's descriptor. The real
// tool's behaviour with long paths is not modelled. close releases it.
func socketPath(dir, name string) (path string, close func(), err error) {
	p := filepath.Join(dir, name)
	if len(p) < 100 {
		return p, func() {}, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", f.Fd(), name), func() { _ = f.Close() }, nil
}

// mpsClient sends each command to the daemon and copies its answer to
// stdout. Without a daemon it fails as the real client does.
func mpsClient(pipeDir string, stdin io.Reader, stdout, stderr io.Writer) int {
	addr, done, err := socketPath(pipeDir, ControlSocket)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "Cannot find MPS control daemon process (%v)\n", err)
		return 1
	}
	defer done()
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if err := mpsRequest(addr, line, stdout); err != nil {
			_, _ = fmt.Fprintf(stderr, "Cannot find MPS control daemon process (%v)\n", err)
			return 1
		}
	}
	return 0
}

func mpsRequest(addr, line string, stdout io.Writer) error {
	conn, err := net.DialTimeout("unix", addr, clientTimeout)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(clientTimeout))
	if _, err := io.WriteString(conn, line+"\n"); err != nil {
		return err
	}
	// The daemon closes the connection after its answer (empty for most
	// commands).
	_, err = io.Copy(stdout, conn)
	return err
}
