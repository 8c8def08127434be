package fakegpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The fake nvidia-imex (see README.md): what it models of the real daemon.
const (
	// IMEXDefaultConfig is where the real tools read their configuration
	// when no -c is given.
	IMEXDefaultConfig = "/etc/nvidia-imex/config.cfg"
	// IMEXReady and IMEXNotReady are the answers to `nvidia-imex-ctl -q`.
	// READY is the real one's; the real not-ready answers are not
	// documented where we could read them, so the fake answers UNAVAILABLE.
	IMEXReady    = "READY"
	IMEXNotReady = "UNAVAILABLE"
	// imexHello is what a fake daemon answers a peer with; a listener that
	// does not answer it is not a peer.
	imexHello = "gpudra-fake-imex"
	// imexRound is how often the peers are dialled; imexDialTimeout bounds
	// one dial and answer.
	imexRound       = 250 * time.Millisecond
	imexDialTimeout = time.Second
)

// IMEXConfig is what the fake reads of an nvidia-imex configuration file.
type IMEXConfig map[string]string

// ReadIMEXConfig parses key=value lines; # starts a comment line.
func ReadIMEXConfig(path string) (IMEXConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := IMEXConfig{}
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: not key=value: %q", path, i+1, l)
		}
		c[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return c, nil
}

func (c IMEXConfig) port(key string, def int) (int, error) {
	v, ok := c[key]
	if !ok || v == "" {
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("%s=%q is not a port", key, v)
	}
	return p, nil
}

// cmdAddress is the command service's address: IMEX_CMD_BIND_INTERFACE_IP
// (empty: all addresses) and IMEX_CMD_PORT.
func (c IMEXConfig) cmdAddress() (string, error) {
	if c["IMEX_CMD_ENABLED"] != "1" {
		return "", errors.New("IMEX_CMD_ENABLED is not 1: the command service is off")
	}
	p, err := c.port("IMEX_CMD_PORT", -1)
	if err != nil || p < 0 {
		return "", errors.Join(err, errors.New("IMEX_CMD_PORT is not set (the fake serves the command service on TCP only)"))
	}
	return net.JoinHostPort(c["IMEX_CMD_BIND_INTERFACE_IP"], strconv.Itoa(p)), nil
}

// readNodes reads IMEX_NODE_CONFIG_FILE: one address a line.
func readNodes(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, nil
}

// imexDaemon is the state of one fake daemon.
type imexDaemon struct {
	log       io.Writer
	cfg       IMEXConfig
	port      int
	nodesFile string

	mu       sync.Mutex
	nodes    []string
	answered map[string]bool
	server   net.Listener
	bound    string
}

// IMEX runs the fake nvidia-imex in the foreground (it must be configured
// with DAEMONIZE=0: the fake does not fork) until SIGTERM or SIGINT, which
// end it with status 0. SIGUSR1 makes it read its node list again.
func IMEX(args []string, stderr io.Writer) int {
	path := IMEXDefaultConfig
	switch {
	case len(args) == 2 && args[0] == "-c":
		path = args[1]
	case len(args) != 0:
		_, _ = fmt.Fprintf(stderr, "fake nvidia-imex: only -c <config> is simulated, got %q\n", args)
		return 2
	}
	d, err := newIMEXDaemon(path, stderr)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-imex: %v\n", err)
		return 1
	}
	addr, _ := d.cfg.cmdAddress()
	cmdL, err := net.Listen("tcp", addr)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-imex: command service: %v\n", err)
		return 1
	}
	defer func() { _ = cmdL.Close() }()
	go d.serveCmd(cmdL)
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	_, _ = fmt.Fprintf(stderr, "fake nvidia-imex: started, config %s, command service on %s\n", path, cmdL.Addr())
	d.reload()
	tick := time.NewTicker(imexRound)
	defer tick.Stop()
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGUSR1 {
				_, _ = fmt.Fprintln(stderr, "fake nvidia-imex: SIGUSR1: reading the node list again")
				d.reload()
				continue
			}
			_, _ = fmt.Fprintf(stderr, "fake nvidia-imex: %v: exiting\n", s)
			d.close()
			return 0
		case <-tick.C:
			d.round()
		}
	}
}

func newIMEXDaemon(path string, log io.Writer) (*imexDaemon, error) {
	cfg, err := ReadIMEXConfig(path)
	if err != nil {
		return nil, fmt.Errorf("read the configuration: %w", err)
	}
	if cfg["DAEMONIZE"] != "0" {
		return nil, errors.New("DAEMONIZE is not 0: the real daemon would fork into the background; the fake only runs in the foreground")
	}
	port, err := cfg.port("SERVER_PORT", 50000)
	if err != nil {
		return nil, err
	}
	if _, err := cfg.cmdAddress(); err != nil {
		return nil, err
	}
	if cfg["IMEX_NODE_CONFIG_FILE"] == "" {
		return nil, errors.New("IMEX_NODE_CONFIG_FILE is not set")
	}
	return &imexDaemon{log: log, cfg: cfg, port: port, nodesFile: cfg["IMEX_NODE_CONFIG_FILE"]}, nil
}

// reload reads the node list; the daemon is not ready until every node of
// the new list has answered.
func (d *imexDaemon) reload() {
	nodes, err := readNodes(d.nodesFile)
	if err != nil {
		_, _ = fmt.Fprintf(d.log, "fake nvidia-imex: node list: %v\n", err)
	}
	d.mu.Lock()
	d.nodes, d.answered = nodes, map[string]bool{}
	d.mu.Unlock()
	_, _ = fmt.Fprintf(d.log, "fake nvidia-imex: nodes %q\n", nodes)
}

// bind listens on SERVER_PORT of BIND_INTERFACE_IP or, when that is empty,
// of the first address of the node list that is this host's.
func (d *imexDaemon) bind(nodes []string) {
	if d.server != nil {
		return
	}
	candidates := nodes
	if ip := d.cfg["BIND_INTERFACE_IP"]; ip != "" {
		candidates = []string{ip}
	}
	for _, ip := range candidates {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(d.port)))
		if err != nil {
			continue
		}
		d.server, d.bound = l, ip
		_, _ = fmt.Fprintf(d.log, "fake nvidia-imex: listening for peers on %s\n", l.Addr())
		go d.servePeers(l)
		return
	}
}

func (d *imexDaemon) servePeers(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = fmt.Fprintln(c, imexHello)
		_ = c.Close()
	}
}

// round dials every node of the list once.
func (d *imexDaemon) round() {
	d.mu.Lock()
	nodes := d.nodes
	d.bind(nodes)
	d.mu.Unlock()
	answered := map[string]bool{}
	for _, n := range nodes {
		answered[n] = dialPeer(net.JoinHostPort(n, strconv.Itoa(d.port)))
	}
	d.mu.Lock()
	if equalStrings(d.nodes, nodes) {
		d.answered = answered
	}
	d.mu.Unlock()
}

func dialPeer(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, imexDialTimeout)
	if err != nil {
		return false
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(imexDialTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.TrimSpace(line) == imexHello
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// state is READY when the daemon listens for peers and every node of a
// non-empty list (its own included) answered in the last round.
func (d *imexDaemon) state() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.server == nil || len(d.nodes) == 0 {
		return IMEXNotReady
	}
	for _, n := range d.nodes {
		if !d.answered[n] {
			return IMEXNotReady
		}
	}
	return IMEXReady
}

// nodeStatus is the answer to -N: one "<address> <CONNECTED|UNREACHABLE>"
// line per node (the real tool's format is not modelled).
func (d *imexDaemon) nodeStatus() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, n := range d.nodes {
		s := "UNREACHABLE"
		if d.answered[n] {
			s = "CONNECTED"
		}
		fmt.Fprintf(&b, "%s %s\n", n, s)
	}
	return b.String()
}

func (d *imexDaemon) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.server != nil {
		_ = d.server.Close()
	}
}
