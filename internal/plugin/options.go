// Package plugin wires gpudra's kubelet plugin: NVML discovery, the
// ResourceSlice it publishes through the kubeletplugin helper, and the
// prepare state machine behind the kubelet's DRA gRPC API.
package plugin

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/envflag"
)

// Options are the plugin's settings, all command-line flags. Only the
// values a DaemonSet gets from the downward API also come from the
// environment (EnvVars).
type Options struct {
	Kubeconfig   string
	KubeAPIQPS   float32
	KubeAPIBurst int
	NodeName     string
	DriverName   string
	// Compatibility is the --compatibility mode: empty for gpudra's names,
	// "nvidia" for NVIDIA's DRA driver names and API (see internal/shared/compat).
	// Validate resolves it with DriverName into names and sets DriverName
	// to the resolved driver name.
	Compatibility string
	// names are the resolved names (compat.Resolve), set by Validate.
	names compat.Names
	// validated: Validate has succeeded (validateOnce).
	validated bool

	CDIRoot             string
	KubeletPluginsDir   string
	KubeletRegistrarDir string
	PodUID              string
	NvidiaDriverRoot    string
	HostDriverRoot      string
	NvidiaCDIHookPath   string
	// NvidiaCDIHookSource is the hook installed when NvidiaCDIHookPath is
	// empty (see cdihook.go).
	NvidiaCDIHookSource string
	CheckpointSync      bool
	CheckpointSyncDir   bool
	MetricsAddress      string
	MaxDevicesPerSlice  int
	// MIG is the --mig mode: off, static or dynamic (see internal/plugin/mig).
	MIG string
	// MIGProfiles limits the profiles dynamic MIG publishes (--mig-profiles).
	MIGProfiles []string
	// NUMANodeAttribute is the form of numaNode: slice.NUMAScalar or
	// slice.NUMAList (--numa-node-attribute).
	NUMANodeAttribute string
	// Sharing: see sharing.go. GPUSharing is deprecated (--gpu-sharing);
	// ConsumableShares is --consumable-shares, parsed by Validate into shares.
	GPUSharing       string
	ConsumableShares string
	// Passthrough is --passthrough: GPUs are also published as vfio devices
	// (passthrough.go).
	Passthrough bool
	// FabricManagerPartitioning is --fabric-manager-partitioning
	// (fabricpartitions.go).
	FabricManagerPartitioning bool
	shares                    slice.ConsumableShares
	NvidiaSMIPath             string
	MPSControlPath            string
	MPSRoot                   string
	// MPSCheckInterval is how often the MPS daemons of prepared claims are
	// checked (0: never; see superviseMPS).
	MPSCheckInterval time.Duration
	// FabricPollInterval is how often the NVLink fabric of fabric-capable
	// GPUs is read again (0: never; fabricpoll.go).
	FabricPollInterval time.Duration
	// MPSDaemon: where MPS control daemons run (mpsdaemons.go).
	MPSDaemon MPSDaemonOptions
	Health    HealthOptions
	Telemetry TelemetryOptions
	Metrics   MetricsOptions
}

// EnvVars are the flags a DaemonSet sets from the downward API (the
// chart's NODE_NAME and POD_UID), and KUBECONFIG, which every Kubernetes
// client reads. The command applies them with envflag.Bind: a flag given on
// the command line wins.
var EnvVars = []envflag.Var{{Flag: "node-name", Env: "NODE_NAME"}, {Flag: "pod-uid", Env: "POD_UID"},
	{Flag: "kubeconfig", Env: "KUBECONFIG"}, {Flag: "mps-daemon-namespace", Env: "POD_NAMESPACE"}}

// InspectEnvVars are EnvVars of the inspect command.
var InspectEnvVars = []envflag.Var{{Flag: "node-name", Env: "NODE_NAME"}}

// Discovery holds the flags inspect and the plugin share.
func (o *Options) addDiscoveryFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", "", "Name of this node; the pool name and the owner of its ResourceSlices. [$NODE_NAME]")
	fs.StringVar(&o.DriverName, "driver-name", v1alpha1.DriverName, "DRA driver name.")
	fs.StringVar(&o.Compatibility, "compatibility", "",
		"nvidia: serve NVIDIA's DRA driver API (driver gpu.nvidia.com, its attribute names, resource.nvidia.com/v1beta1 GpuConfig and "+
			"MigDeviceConfig); empty for gpudra's own names.")
	fs.StringVar(&o.NvidiaDriverRoot, "nvidia-driver-root", "/",
		"Root under which the NVIDIA driver is installed, as this process sees it (the chart mounts the host's driver root at /driver-root). "+
			"A simulated driver root (make fake-driver-root) runs the same code without GPUs.")
	fs.StringVar(&o.HostDriverRoot, "host-driver-root", "",
		"The same driver root as the host (and so the container runtime) sees it, e.g. / or /run/nvidia/driver; CDI specs name host paths. "+
			"Default: --nvidia-driver-root (the plugin runs on the host).")
	fs.IntVar(&o.MaxDevicesPerSlice, "max-devices-per-slice", 128, "Split the pool into ResourceSlices of at most this many devices (API maximum 128).")
	fs.StringVar(&o.MIG, "mig", "static",
		"MIG handling: static (GPUs in MIG mode publish their existing MIG devices; the plugin never changes MIG configuration), "+
			"dynamic (MIG-capable GPUs publish the whole GPU and every MIG placement; MIG devices are created at prepare and destroyed at unprepare), "+
			"or off (every GPU whole). GPUs without MIG are always published whole.")
	fs.StringSliceVar(&o.MIGProfiles, "mig-profiles", nil,
		"With --mig=dynamic: publish only these MIG profiles (e.g. 1g.10gb,3g.40gb; default all). Fewer devices per GPU make scheduling "+
			"on the node cheaper; the GPU's MIG counters are unchanged.")
	fs.StringVar(&o.NUMANodeAttribute, "numa-node-attribute", slice.NUMAScalar,
		"Form of resource.kubernetes.io/numaNode: scalar (the GPU's NUMA node), or list (the GPU's node, then the other nodes of its socket "+
			"at the smallest distance: GPUs on two sub-NUMA clusters of one socket then match a matchAttribute on numaNode). list needs the "+
			"DRAListTypeAttributes feature gate on the API server and the scheduler (alpha in Kubernetes 1.36 and 1.37).")
	o.addGPUSharingFlag(fs)
	o.addPassthroughFlag(fs)
}

// AddInspectFlags registers the flags the inspect command needs.
func (o *Options) AddInspectFlags(fs *pflag.FlagSet) { o.addDiscoveryFlags(fs) }

// AddFlags registers all plugin flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.addDiscoveryFlags(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Kubeconfig file; in-cluster config when empty. [$KUBECONFIG]")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", 200,
		"Client-side QPS limit towards the API server (ResourceSlice publishing). Claim reads for prepare calls are exempt: they follow the kubelet's own rate-limited reads one to one.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 400, "Client-side burst towards the API server.")
	fs.StringVar(&o.CDIRoot, "cdi-root", "/var/run/cdi", "Directory for the per-claim CDI specs; must be one the container runtime reads.")
	fs.StringVar(&o.KubeletPluginsDir, "kubelet-plugins-directory", "/var/lib/kubelet/plugins",
		"Kubelet plugin directory; the plugin's socket and checkpoint live in <dir>/<driver-name>.")
	fs.StringVar(&o.KubeletRegistrarDir, "kubelet-registrar-directory", "/var/lib/kubelet/plugins_registry",
		"Kubelet plugin registration directory.")
	fs.StringVar(&o.PodUID, "pod-uid", "",
		"UID of the plugin's pod; enables rolling updates where old and new plugin pods run side by side. [$POD_UID]")
	o.addCDIHookFlags(fs)
	o.addFabricManagerFlag(fs)
	o.addMetricsFlags(fs)
	o.addHealthFlags(fs)
	o.addTelemetryFlags(fs)
	o.addFabricFlags(fs)
	fs.BoolVar(&o.CheckpointSync, "checkpoint-sync", false,
		"fsync each completed claim's checkpoint record before its rename. Off, records are written without fsync: a crash of the plugin keeps them "+
			"(the kernel has them), and a power loss, the one thing an fsync protects against, reboots the node, after which the records of the "+
			"earlier boot are discarded anyway. It adds one fsync to each prepare.")
	fs.BoolVar(&o.CheckpointSyncDir, "checkpoint-sync-dir", false,
		"Also fsync the checkpoint directory after each fsynced record write (--checkpoint-sync) and each record removal. A rename lost to a power failure only matters within a boot, and records of an earlier boot are discarded anyway.")
	o.addSharingToolFlags(fs)
	o.addMPSDaemonFlags(fs)
}

// resolveNames resolves --compatibility and --driver-name into the names
// the plugin publishes and reads, and DriverName into the resolved name.
func (o *Options) resolveNames() error {
	names, err := compat.Resolve(compat.Flags{Compatibility: o.Compatibility, Driver: o.DriverName, HealthTaints: o.Health.Taints,
		Passthrough: o.Passthrough})
	if err != nil {
		return err
	}
	o.names, o.DriverName = names, names.Driver
	return nil
}

// validateOnce runs Validate unless it has succeeded before: the names are
// resolved once per program, however many entry points check the options.
func (o *Options) validateOnce() error {
	if o.validated {
		return nil
	}
	return o.Validate()
}

// PluginDataDir is where the socket and checkpoint of the driver live.
func (o *Options) PluginDataDir() string { return filepath.Join(o.KubeletPluginsDir, o.DriverName) }

// CheckpointDir holds one checkpoint record per prepared claim.
func (o *Options) CheckpointDir() string { return filepath.Join(o.PluginDataDir(), "checkpoint") }

// Validate reports flags that cannot work together.
func (o *Options) Validate() error {
	if o.NodeName == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required: it names the node's ResourceSlice pool")
	}
	if err := o.resolveNames(); err != nil {
		return err
	}
	if o.MaxDevicesPerSlice < 1 || o.MaxDevicesPerSlice > 128 {
		return fmt.Errorf("--max-devices-per-slice=%d: must be between 1 and 128", o.MaxDevicesPerSlice)
	}
	switch o.NUMANodeAttribute {
	case "", slice.NUMAScalar, slice.NUMAList:
	default:
		return fmt.Errorf("--numa-node-attribute=%q: must be %q or %q", o.NUMANodeAttribute, slice.NUMAScalar, slice.NUMAList)
	}
	mode, err := mig.ParseMode(o.MIG)
	if err != nil {
		return err
	}
	if o.FabricPollInterval < 0 {
		return fmt.Errorf("--fabric-poll-interval=%s: must be 0 (read the fabric once) or above", o.FabricPollInterval)
	}
	if err := o.validateMetrics(); err != nil {
		return err
	}
	if err := o.validateTelemetry(); err != nil {
		return err
	}
	if err := o.validateSharing(mode); err != nil {
		return err
	}
	if err := o.validatePassthrough(); err != nil {
		return err
	}
	if err := o.validateMPSDaemon(); err != nil {
		return err
	}
	o.validated = true
	return nil
}
