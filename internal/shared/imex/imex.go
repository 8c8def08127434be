// Package imex is the one place that names what the IMEX daemon of a
// ComputeDomain (gpu-kubelet-plugin imex-daemon, internal/plugin/imexdaemon)
// and the node side that prepares the daemon pod's claim agree on: the
// environment the claim's CDI edits give the daemon container, where the
// driver's IMEX tools are, and where the daemon writes its files. It has no
// dependencies, so the controller, the kubelet plugin and the daemon can all
// import it.
package imex

// Environment of the daemon container.
const (
	// NodesConfigEnv (set by the node side through CDI) is the path, in the
	// daemon container, of the file that lists the IP addresses of the
	// domain's daemons in this node's clique, one per line, this node's
	// included. It may be empty at first and changes while the daemon runs;
	// the node side replaces it atomically (write and rename).
	NodesConfigEnv = "GPUDRA_IMEX_NODES_CONFIG"
	// DriverRootEnv (set by the node side through CDI) is where the NVIDIA
	// driver root is mounted in the container. The IMEX tools run
	// chrooted into it; empty means they are run from $PATH, unchrooted
	// (tests).
	DriverRootEnv = "GPUDRA_DRIVER_ROOT"
	// DomainUIDEnv, DomainEnv, NodeNameEnv and PodIPEnv are set by the
	// controller's DaemonSet (internal/controller/computedomain).
	DomainUIDEnv = "COMPUTE_DOMAIN_UID"
	DomainEnv    = "COMPUTE_DOMAIN"
	NodeNameEnv  = "NODE_NAME"
	PodIPEnv     = "POD_IP"
)

// The driver's IMEX tools, looked up in the driver root's tool directories
// (usr/bin, or bin on GKE; see nvmllib.ToolDirs).
const (
	DaemonBinary = "nvidia-imex"
	CtlBinary    = "nvidia-imex-ctl"
)

// Files the daemon writes, inside the driver root so that the chrooted
// nvidia-imex reads them: <root>/<WorkDirBase>/<COMPUTE_DOMAIN_UID>/.
// A real driver root has a sticky world-writable tmp, and so has a fake one
// (test/fakedriver).
const (
	WorkDirBase = "tmp/gpudra-imex"
	// ConfigFile is the generated nvidia-imex configuration.
	ConfigFile = "config.cfg"
	// NodesFile is the daemon's copy of the nodes config, which the
	// configuration names as IMEX_NODE_CONFIG_FILE.
	NodesFile = "nodes.cfg"
)

// Ports and answers of IMEX.
const (
	// ServerPort is the TCP port the daemons of a domain talk to each
	// other on (SERVER_PORT); CmdPort the command service nvidia-imex-ctl
	// queries (IMEX_CMD_PORT), bound to the loopback address of the pod.
	ServerPort = 50000
	CmdPort    = 50005
	CmdAddress = "127.0.0.1"
	// Ready is what `nvidia-imex-ctl -q` prints when the local daemon is
	// ready. NotReady is what the simulation prints otherwise: the real
	// tool's other answers are not documented where we could read them.
	Ready    = "READY"
	NotReady = "UNAVAILABLE"
)

// ClaimConfig is the opaque configuration, for the channel driver, of a
// ComputeDomain's channel and daemon claims: which domain the claim belongs
// to and, for channels, how many a claim gets. The controller
// (internal/controller/computedomain) writes it into the templates it
// creates; the node side (internal/plugin/computedomain) decodes it. Kind
// is compat.ComputeDomainNames' ChannelConfigKind or DaemonConfigKind,
// APIVersion its ConfigAPIVersion; the JSON names are NVIDIA's.
type ClaimConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// DomainID is the ComputeDomain's UID.
	DomainID string `json:"domainID"`
	// AllocationMode is Single or All (v1alpha1.ChannelAllocationMode);
	// empty in daemon claims, and read as Single in channel claims.
	AllocationMode string `json:"allocationMode,omitempty"`
}
