package fakegpu

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

type daemon struct {
	logDir string
	log    *os.File
	state  MPSState
}

// mpsDaemon serves the control socket of pipeDir until "quit". Like the
// real daemon it refuses to start while another one answers there, and
// replaces a socket left behind by a daemon that died.
func mpsDaemon(pipeDir, logDir string, stdout io.Writer) error {
	for _, d := range []string{pipeDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, ControlLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	d := &daemon{logDir: logDir, log: logFile, state: MPSState{PID: os.Getpid(), PinnedMemLimits: map[string]string{}}}
	addr, done, err := socketPath(pipeDir, ControlSocket)
	if err != nil {
		return err
	}
	defer done()
	if c, err := net.DialTimeout("unix", addr, time.Second); err == nil {
		_ = c.Close()
		d.logf("An instance of this daemon is already running with pipe directory %s", pipeDir)
		return fmt.Errorf("an MPS control daemon already runs with pipe directory %s", pipeDir)
	}
	_ = os.Remove(filepath.Join(pipeDir, ControlSocket)) // left by a daemon that died
	l, err := net.Listen("unix", addr)
	if err != nil {
		return fmt.Errorf("create control socket: %w", err)
	}
	// Close removes the socket, so only a daemon that is killed leaves one.
	defer func() { _ = l.Close() }()
	pidFile := filepath.Join(pipeDir, ControlPIDFile)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	if v := os.Getenv("CUDA_VISIBLE_DEVICES"); v != "" {
		d.state.Devices = strings.Split(v, ",")
	}
	d.logf("Startup, devices %s", strings.Join(d.state.Devices, ","))
	if err := d.save(); err != nil {
		return err
	}
	_, _ = fmt.Fprintln(stdout, "fake MPS control daemon started, pid", os.Getpid())

	conns := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c
		}
	}()
	var quitAt <-chan time.Time
	for {
		select {
		case c, ok := <-conns:
			if !ok {
				return errors.New("control socket closed")
			}
			if quit := d.serve(c); quit && quitAt == nil {
				delay, _ := time.ParseDuration(os.Getenv(QuitDelayEnv))
				quitAt = time.After(delay)
			}
		case <-quitAt:
			d.logf("Shutdown")
			_ = os.Remove(pidFile)
			return nil
		}
	}
}

// serve answers one client connection: one command line, then the answer,
// then the daemon closes the connection.
func (d *daemon) serve(c net.Conn) (quit bool) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(clientTimeout))
	line, rerr := bufio.NewReader(c).ReadString('\n')
	if rerr != nil && line == "" {
		return false // a client that connected and left (a liveness check)
	}
	quit, answer := d.handle(strings.Fields(line))
	if answer != "" {
		_, _ = io.WriteString(c, answer+"\n")
	}
	if err := d.save(); err != nil {
		// The log directory was removed under it: it keeps serving.
		d.logf("Error: cannot save state: %v", err)
	}
	return quit
}

var limitRE = regexp.MustCompile(`^[0-9]+[MG]$`)

// handle applies one command; it reports whether it was "quit" and what
// the daemon answers.
func (d *daemon) handle(cmd []string) (quit bool, answer string) {
	if len(cmd) == 0 {
		return false, ""
	}
	d.logf("Command: %s", strings.Join(cmd, " "))
	switch {
	case cmd[0] == "quit":
		return true, ""
	case cmd[0] == "set_default_active_thread_percentage" && len(cmd) == 2:
		n, err := strconv.Atoi(cmd[1])
		if err != nil || n < 1 || n > 100 {
			d.logf("Error: invalid active thread percentage %q", cmd[1])
			return false, ""
		}
		d.state.ActiveThreadPercentage = n
	case cmd[0] == "get_default_active_thread_percentage" && len(cmd) == 1:
		p := d.state.ActiveThreadPercentage
		if p == 0 {
			p = 100
		}
		return false, fmt.Sprintf("%.1f", float64(p))
	case cmd[0] == "set_default_device_pinned_mem_limit" && len(cmd) == 3:
		dev, err := strconv.Atoi(cmd[1])
		if err != nil || dev < 0 || dev >= len(d.state.Devices) {
			d.logf("Error: invalid device %q (daemon has %d devices)", cmd[1], len(d.state.Devices))
			return false, ""
		}
		if !limitRE.MatchString(cmd[2]) {
			d.logf("Error: invalid limit %q", cmd[2])
			return false, ""
		}
		d.state.PinnedMemLimits[cmd[1]] = cmd[2]
	case cmd[0] == "get_server_list" && len(cmd) == 1:
		// No MPS servers in the simulation: an empty list.
	case strings.HasPrefix(cmd[0], "get_"):
	default:
		d.logf("Error: unknown command %q", strings.Join(cmd, " "))
	}
	return false, ""
}

func (d *daemon) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(d.log, "[%s] %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func (d *daemon) save() error {
	b, err := json.Marshal(d.state)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(d.logDir, MPSStateFile), b, 0o644)
}
