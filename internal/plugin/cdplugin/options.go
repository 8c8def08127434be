// Package cdplugin runs the kubelet plugin of the ComputeDomain channel
// driver (compute-domain.gpudra.io, compute-domain.nvidia.com in the NVIDIA
// compatibility mode; the command `gpu-kubelet-plugin compute-domain`): it
// publishes the node's IMEX channel and daemon devices and serves their
// claims through internal/plugin/computedomain, the node side library.
package cdplugin

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/envflag"
)

// Options are the channel plugin's flags, in the style of the GPU plugin's
// (internal/plugin.Options): the same names for the same things.
type Options struct {
	Kubeconfig string
	NodeName   string
	// Namespace is the driver's namespace: the only one whose claims may
	// be daemon claims (the controller creates the daemons there).
	Namespace string
	// Compatibility is --compatibility: empty for gpudra's names, "nvidia"
	// for NVIDIA's (compat.Names.ComputeDomain).
	Compatibility       string
	NvidiaDriverRoot    string
	HostDriverRoot      string
	CDIRoot             string
	KubeletPluginsDir   string
	KubeletRegistrarDir string
	PodUID              string
	// Channels is how many IMEX channels the node publishes.
	Channels           int
	MaxDevicesPerSlice int
	// DaemonReadyWait is how long a channel claim's prepare waits for the
	// domain's daemon on this node before it fails (the kubelet retries).
	DaemonReadyWait time.Duration
	// HealthAddress serves /healthz and /readyz; empty: off.
	HealthAddress string
	// FabricRetryInterval is how often NVML is read again while the NVLink
	// fabric registration of a GPU has not completed.
	FabricRetryInterval time.Duration

	// healthListener, when set (tests), serves /healthz and /readyz
	// instead of HealthAddress.
	healthListener net.Listener

	names     compat.Names
	validated bool
}

// EnvVars are the flags a DaemonSet sets from the downward API; a flag on
// the command line wins (envflag.Bind).
var EnvVars = []envflag.Var{{Flag: "node-name", Env: "NODE_NAME"}, {Flag: "pod-uid", Env: "POD_UID"},
	{Flag: "kubeconfig", Env: "KUBECONFIG"}, {Flag: "namespace", Env: "POD_NAMESPACE"}}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Kubeconfig file; in-cluster config when empty. [$KUBECONFIG]")
	fs.StringVar(&o.NodeName, "node-name", "", "Name of this node: the pool of its devices and the node labelled into ComputeDomains. [$NODE_NAME]")
	fs.StringVar(&o.Namespace, "namespace", "", "The driver's namespace, the only one whose claims may be IMEX daemon claims. [$POD_NAMESPACE]")
	fs.StringVar(&o.Compatibility, "compatibility", "",
		"nvidia: serve NVIDIA's ComputeDomain names (driver compute-domain.nvidia.com, resource.nvidia.com ComputeDomains and claim "+
			"configurations); empty for gpudra's own (compute-domain.gpudra.io).")
	fs.StringVar(&o.NvidiaDriverRoot, "nvidia-driver-root", "/",
		"Root under which the NVIDIA driver is installed, as this process sees it (the chart mounts the host's driver root at /driver-root).")
	fs.StringVar(&o.HostDriverRoot, "host-driver-root", "",
		"The same driver root as the host sees it; CDI specs name host paths. Default: --nvidia-driver-root.")
	fs.StringVar(&o.CDIRoot, "cdi-root", "/var/run/cdi", "Directory for the per-claim CDI specs; must be one the container runtime reads.")
	fs.StringVar(&o.KubeletPluginsDir, "kubelet-plugins-directory", "/var/lib/kubelet/plugins",
		"Kubelet plugin directory; the socket, the prepared claims' records and the domains' node lists live in <dir>/<driver name>.")
	fs.StringVar(&o.KubeletRegistrarDir, "kubelet-registrar-directory", "/var/lib/kubelet/plugins_registry",
		"Kubelet plugin registration directory.")
	fs.StringVar(&o.PodUID, "pod-uid", "",
		"UID of the plugin's pod; enables rolling updates where old and new plugin pods run side by side. [$POD_UID]")
	fs.IntVar(&o.Channels, "channels", computedomain.DefaultChannels,
		fmt.Sprintf("Number of IMEX channels to publish (channel-0 ...; at most %d).", computedomain.MaxChannels))
	fs.IntVar(&o.MaxDevicesPerSlice, "max-devices-per-slice", 128, "Split the pool into ResourceSlices of at most this many devices (API maximum 128).")
	fs.DurationVar(&o.DaemonReadyWait, "daemon-ready-wait", DefaultDaemonReadyWait,
		"How long a channel claim's prepare waits for the ComputeDomain's IMEX daemon on this node to become ready before it fails; "+
			"the kubelet retries a failed prepare, with a growing back-off. Keep it below the kubelet's 45s timeout of a prepare call.")
	fs.StringVar(&o.HealthAddress, "health-address", "",
		"Serve /healthz and /readyz on this address (e.g. :8081); empty: off.")
	fs.DurationVar(&o.FabricRetryInterval, "fabric-retry-interval", DefaultFabricRetryInterval,
		"While the NVLink fabric registration of a GPU has not completed (Fabric Manager still training the NVLinks), "+
			"publish nothing and read NVML again at this interval; /readyz reports the wait. Once running, the fabric of GPUs that have one "+
			"is read again at this interval: a registration that starts over or fails withdraws the IMEX channels (/readyz says why) "+
			"until it completes, and a clique change publishes them in the new clique.")
}

// Validate checks the flags and resolves the names.
func (o *Options) Validate() error {
	switch {
	case o.NodeName == "":
		return errors.New("--node-name (or $NODE_NAME) is required: it names the node's pool and the node labelled into domains")
	case o.Namespace == "":
		return errors.New("--namespace (or $POD_NAMESPACE) is required: the driver's namespace, where the IMEX daemons run")
	case o.MaxDevicesPerSlice < 1 || o.MaxDevicesPerSlice > 128:
		return fmt.Errorf("--max-devices-per-slice=%d: must be between 1 and 128", o.MaxDevicesPerSlice)
	case o.Channels < 1 || o.Channels > computedomain.MaxChannels:
		return fmt.Errorf("--channels=%d: must be between 1 and %d", o.Channels, computedomain.MaxChannels)
	case o.FabricRetryInterval <= 0:
		return fmt.Errorf("--fabric-retry-interval=%s: must be above 0", o.FabricRetryInterval)
	case o.DaemonReadyWait < 0 || o.DaemonReadyWait >= kubeletCallTimeout:
		return fmt.Errorf("--daemon-ready-wait=%s: must be 0 or more and below the kubelet's %s timeout of a prepare call", o.DaemonReadyWait, kubeletCallTimeout)
	}
	names, err := compat.Resolve(compat.Flags{Compatibility: o.Compatibility})
	if err != nil {
		return err
	}
	o.names, o.validated = names, true
	return nil
}

func (o *Options) validateOnce() error {
	if o.validated {
		return nil
	}
	return o.Validate()
}

// Names are the channel driver's names in the resolved mode (after Validate).
func (o *Options) Names() compat.ComputeDomainNames { return o.names.ComputeDomain() }

// DefaultDaemonReadyWait: a channel claim's prepare waits in-process for
// the daemon (instead of failing: the kubelet retries a failed prepare only
// at its pod resync, 60-90 s later, kubernetes#139836) for most of
// kubeletCallTimeout, how long the kubelet waits
// for a NodePrepareResources call (k8s.io/kubernetes pkg/kubelet/cm/dra/
// plugin, defaultClientCallTimeout, v1.37).
const (
	DefaultDaemonReadyWait = 30 * time.Second
	kubeletCallTimeout     = 45 * time.Second
)

// DefaultFabricRetryInterval: how often NVML is read again while the
// NVLink fabric registration has not completed; the fabric manager takes
// seconds to minutes after boot, and a read costs an nvmlInit.
const DefaultFabricRetryInterval = 5 * time.Second

// PluginDataDir is the driver's directory: dra.sock, the claims' records, the
// domains' node lists.
func (o *Options) PluginDataDir() string {
	return filepath.Join(o.KubeletPluginsDir, o.Names().Driver)
}
