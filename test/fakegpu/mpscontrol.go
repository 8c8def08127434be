package fakegpu

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files of the fake MPS control daemon.
const (
	// ControlPipe is the FIFO in the pipe directory that clients write
	// commands to (the real daemon has a unix socket of the same name).
	ControlPipe = "control"
	// ControlLog is the daemon's log in the log directory, as with the real one.
	ControlLog = "control.log"
	// MPSStateFile, in the log directory, holds the daemon's settings as JSON
	// (MPSState) after every command, for tests.
	MPSStateFile = "fake-mps-state.json"
)

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
// control daemon until "quit" (or until its pipe directory is removed, so a
// torn-down test cluster leaves nothing behind); no arguments sends the
// commands read from stdin to the daemon. Directories come from
// CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY as with the real tool;
// their defaults are the real tool's, or mps/pipe and mps/log in the state
// directory when there is one (StateDir: a tool installed in a fake driver root).
func MPSControl(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	pipeDir, logDir := mpsDirs()
	switch {
	case len(args) == 0:
		return mpsClient(pipeDir, stdin, stderr)
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

func mpsClient(pipeDir string, stdin io.Reader, stderr io.Writer) int {
	f, err := os.OpenFile(filepath.Join(pipeDir, ControlPipe), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "Cannot find MPS control daemon process (%v)\n", err)
		return 1
	}
	defer f.Close()
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		// Lines shorter than PIPE_BUF are written atomically.
		if _, err := f.WriteString(line + "\n"); err != nil {
			_, _ = fmt.Fprintln(stderr, "write to MPS control daemon:", err)
			return 1
		}
	}
	return 0
}

type daemon struct {
	logDir string
	log    *os.File
	state  MPSState
}

func mpsDaemon(pipeDir, logDir string, stdout io.Writer) error {
	for _, d := range []string{pipeDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	fifo := filepath.Join(pipeDir, ControlPipe)
	tmp := fifo + ".new"
	_ = os.Remove(tmp)
	if err := syscall.Mkfifo(tmp, 0o600); err != nil {
		return fmt.Errorf("create control pipe: %w", err)
	}
	// Read and write: the daemon never sees EOF when a client closes.
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// Publish the pipe only once it has a reader: a client that finds it can
	// write to it.
	if err := os.Rename(tmp, fifo); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, ControlLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	d := &daemon{logDir: logDir, log: logFile, state: MPSState{PID: os.Getpid(), PinnedMemLimits: map[string]string{}}}
	if v := os.Getenv("CUDA_VISIBLE_DEVICES"); v != "" {
		d.state.Devices = strings.Split(v, ",")
	}
	d.logf("Startup, devices %s", strings.Join(d.state.Devices, ","))
	if err := d.save(); err != nil {
		return err
	}
	_, _ = fmt.Fprintln(stdout, "fake MPS control daemon started, pid", os.Getpid())

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return errors.New("control pipe closed")
			}
			if d.handle(strings.Fields(line)) {
				d.logf("Shutdown")
				_ = os.Remove(fifo)
				return nil
			}
			if err := d.save(); err != nil {
				return err
			}
		case <-tick.C:
			if _, err := os.Stat(pipeDir); err != nil {
				d.logf("Pipe directory %s is gone, exiting", pipeDir)
				return nil
			}
		}
	}
}

var limitRE = regexp.MustCompile(`^[0-9]+[MG]$`)

// handle applies one command and reports whether it was "quit".
func (d *daemon) handle(cmd []string) bool {
	if len(cmd) == 0 {
		return false
	}
	d.logf("Command: %s", strings.Join(cmd, " "))
	switch {
	case cmd[0] == "quit":
		return true
	case cmd[0] == "set_default_active_thread_percentage" && len(cmd) == 2:
		n, err := strconv.Atoi(cmd[1])
		if err != nil || n < 1 || n > 100 {
			d.logf("Error: invalid active thread percentage %q", cmd[1])
			return false
		}
		d.state.ActiveThreadPercentage = n
	case cmd[0] == "set_default_device_pinned_mem_limit" && len(cmd) == 3:
		dev, err := strconv.Atoi(cmd[1])
		if err != nil || dev < 0 || dev >= len(d.state.Devices) {
			d.logf("Error: invalid device %q (daemon has %d devices)", cmd[1], len(d.state.Devices))
			return false
		}
		if !limitRE.MatchString(cmd[2]) {
			d.logf("Error: invalid limit %q", cmd[2])
			return false
		}
		d.state.PinnedMemLimits[cmd[1]] = cmd[2]
	case strings.HasPrefix(cmd[0], "get_"):
	default:
		d.logf("Error: unknown command %q", strings.Join(cmd, " "))
	}
	return false
}

func (d *daemon) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(d.log, "[%s] %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func (d *daemon) save() error {
	b, err := json.Marshal(d.state)
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.logDir, MPSStateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.logDir, MPSStateFile))
}
