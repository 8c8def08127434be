package fakegpu

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// imexCmdQuery and imexCmdNodes are the fake command service's requests.
const (
	imexCmdQuery = "q"
	imexCmdNodes = "N"
)

// serveCmd answers the fake nvidia-imex-ctl: one request line, one answer.
func (d *imexDaemon) serveCmd(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(clientTimeout))
			req, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			switch strings.TrimSpace(req) {
			case imexCmdQuery:
				_, _ = fmt.Fprintln(c, d.state())
			case imexCmdNodes:
				_, _ = io.WriteString(c, d.nodeStatus())
			}
		}()
	}
}

// IMEXCtl runs the fake nvidia-imex-ctl: [-c <config>] -q prints the local
// daemon's state once (READY or UNAVAILABLE, exit 0 either way); -N prints
// one line per node of its list. The daemon not answering is exit 1; flags
// of the real tool that are not simulated and unknown flags are exit 2.
func IMEXCtl(args []string, stdout, stderr io.Writer) int {
	path, req := IMEXDefaultConfig, ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-c":
			if i+1 >= len(args) {
				_, _ = fmt.Fprintln(stderr, "fake nvidia-imex-ctl: -c needs the configuration's path")
				return 2
			}
			i++
			path = args[i]
		case "-q", "-N":
			if req != "" {
				_, _ = fmt.Fprintln(stderr, "fake nvidia-imex-ctl: only one of -q and -N")
				return 2
			}
			req = strings.TrimPrefix(a, "-")
		case "-i", "-u", "-n", "-s", "-d", "-m", "-H", "-t", "-j":
			_, _ = fmt.Fprintf(stderr, "fake nvidia-imex-ctl: %s is an option of the real tool that the fake does not simulate (only -c, -q, -N)\n", a)
			return 2
		default:
			_, _ = fmt.Fprintf(stderr, "fake nvidia-imex-ctl: unknown option %q\nUsage: nvidia-imex-ctl [-c <config>] <-q|-N>\n", a)
			return 2
		}
	}
	if req == "" {
		_, _ = fmt.Fprintln(stderr, "fake nvidia-imex-ctl: one of -q and -N is required")
		return 2
	}
	cfg, err := ReadIMEXConfig(path)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-imex-ctl: read the configuration: %v\n", err)
		return 1
	}
	addr, err := cfg.cmdAddress()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-imex-ctl: %v\n", err)
		return 1
	}
	if host, port, _ := net.SplitHostPort(addr); host == "" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	answer, err := imexRequest(addr, req)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-imex-ctl: no answer from the IMEX daemon's command service at %s: %v\n", addr, err)
		return 1
	}
	_, _ = io.WriteString(stdout, answer)
	return 0
}

func imexRequest(addr, req string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, clientTimeout)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(clientTimeout))
	if _, err := fmt.Fprintln(c, req); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	if len(b) == 0 && req == imexCmdQuery {
		return "", fmt.Errorf("empty answer")
	}
	return string(b), nil
}
