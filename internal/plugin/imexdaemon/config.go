package imexdaemon

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

// config renders nvidia-imex's configuration (key=value lines). What each
// setting is for:
//   - DAEMONIZE=0: nvidia-imex forks into the background by default; run
//     supervises it as its child, so it must stay in the foreground.
//   - LOG_FILE_NAME empty: the log goes to stderr, so the pod's log has it.
//   - SERVER_PORT: the daemons of a domain connect to each other here;
//     BIND_INTERFACE_IP empty: the daemon binds the address of the node
//     list that is its own (the pod's IP).
//   - IMEX_NODE_CONFIG_FILE: the daemon's copy of the node list.
//   - IMEX_WAIT_FOR_QUORUM=RECOVERY: as NVIDIA's ComputeDomain daemon
//     sets it (what it changes was not verified against real IMEX).
//   - IMEX_CMD_*: the command service nvidia-imex-ctl (the readiness
//     check) queries, on the pod's loopback address only.
//   - IMEX_ENABLE_AUTH_ENCRYPTION=0: no certificates are distributed.
func (o *Options) config() []byte {
	var b bytes.Buffer
	set := func(k string, v any) { fmt.Fprintf(&b, "%s=%v\n", k, v) }
	b.WriteString("# Written by gpu-kubelet-plugin imex-daemon run for ComputeDomain " + o.DomainUID + "; rewritten at every start.\n")
	set("LOG_LEVEL", 4)
	set("LOG_FILE_NAME", "")
	set("LOG_USE_SYSLOG", 0)
	set("DAEMONIZE", 0)
	set("BIND_INTERFACE_IP", "")
	set("SERVER_PORT", o.ServerPort)
	set("IMEX_NODE_CONFIG_FILE", o.nodesPath())
	set("IMEX_WAIT_FOR_QUORUM", "RECOVERY")
	set("IMEX_ENABLE_AUTH_ENCRYPTION", 0)
	set("IMEX_CMD_ENABLED", 1)
	set("IMEX_CMD_BIND_INTERFACE_IP", imex.CmdAddress)
	set("IMEX_CMD_PORT", o.CmdPort)
	return b.Bytes()
}

// writeConfig creates the work directory and writes the configuration.
func (o *Options) writeConfig() error {
	dir := o.hostPath(o.workDir())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the IMEX daemon's directory in the driver root (its tmp must be writable): %w", err)
	}
	if err := atomicfile.WriteFile(o.hostPath(o.configPath()), o.config(), 0o644); err != nil {
		return fmt.Errorf("write the IMEX daemon's configuration: %w", err)
	}
	return nil
}

// readNodes reads the node side's node list, normalized (one address a
// line, no blanks). A missing file is an empty list: the node side may
// not have written it yet.
func (o *Options) readNodes() ([]byte, error) {
	data, err := os.ReadFile(o.NodesConfig)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the domain's node list $%s=%s: %w", imex.NodesConfigEnv, o.NodesConfig, err)
	}
	var b bytes.Buffer
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes(), nil
}

// writeNodes replaces the daemon's copy of the node list.
func (o *Options) writeNodes(nodes []byte) error {
	if err := atomicfile.WriteFile(o.hostPath(o.nodesPath()), nodes, 0o644); err != nil {
		return fmt.Errorf("copy the domain's node list for nvidia-imex: %w", err)
	}
	return nil
}
