package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// GPU sharing modes of a node (--gpu-sharing, deprecated: --consumable-shares
// replaces it).
const (
	// SharingExclusive publishes each GPU for one claim at a time.
	SharingExclusive = "exclusive"
	// SharingConsumable is --consumable-shares=memory.
	SharingConsumable = "consumable"
)

func (o *Options) addGPUSharingFlag(fs *pflag.FlagSet) {
	fs.StringVar(&o.GPUSharing, "gpu-sharing", SharingExclusive,
		"Deprecated: use --consumable-shares. 'consumable' is --consumable-shares=memory; 'exclusive' changes nothing.")
	fs.StringVar(&o.ConsumableShares, "consumable-shares", "",
		"Publish whole GPUs and static MIG devices for several claims at once (allowMultipleAllocations), as NVIDIA's flag of "+
			"the same name: '' or 'disabled' (the default); 'memory' (each claim consumes capacity.requests.memory, all of it if it asks for none); "+
			"'unlimited' (a claim consumes only the memory it asks for, none by default); or a positive integer N (as unlimited, "+
			"plus a capacity 'shares' of N, one per claim by default). A share that consumed memory is held to it by an MPS "+
			"pinned-memory limit. Not with --mig=dynamic.")
}

func (o *Options) addSharingToolFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NvidiaSMIPath, "nvidia-smi-path", "",
		"nvidia-smi used to set GPU time slices (NVML has no API for it). Default: the first nvidia-smi in usr/bin, usr/sbin, bin, sbin, opt/bin of --nvidia-driver-root, else $PATH.")
	fs.StringVar(&o.MPSControlPath, "mps-control-path", "",
		"nvidia-cuda-mps-control used to run MPS control daemons. Default: found like nvidia-smi.")
	fs.StringVar(&o.MPSRoot, "mps-root", "",
		"Host directory for the MPS daemons' pipe and log directories (mounted into containers). Default: <plugin dir>/mps.")
	fs.DurationVar(&o.MPSCheckInterval, "mps-check-interval", 10*time.Second,
		"How often the MPS control daemon of every prepared claim is asked whether it answers; one that does not (its plugin "+
			"container was restarted, or a rolling update's old pod exited) is started again and a MPSDaemonReplaced event "+
			"is recorded on the claim. 0 disables the check (recovery and repeated prepares still do it).")
}

// superviseMPS checks the MPS daemons of prepared claims every interval
// until ctx is done (Manager.CheckMPSDaemons; each claim under its lock).
func superviseMPS(ctx context.Context, m *prepare.Manager, interval time.Duration) {
	_ = wait.PollUntilContextCancel(ctx, interval, false, func(ctx context.Context) (bool, error) {
		m.CheckMPSDaemons(ctx)
		return false, nil
	})
}

// validateSharing parses --consumable-shares into o.shares, with
// --gpu-sharing=consumable as its deprecated alias for "memory".
func (o *Options) validateSharing(migMode mig.Mode) error {
	shares, err := slice.ParseConsumableShares(o.ConsumableShares)
	if err != nil {
		return err
	}
	switch o.GPUSharing {
	case "", SharingExclusive:
	case SharingConsumable:
		if strings.TrimSpace(o.ConsumableShares) != "" && shares != (slice.ConsumableShares{Mode: slice.SharesMemory}) {
			return fmt.Errorf("--gpu-sharing=%s is the deprecated form of --consumable-shares=%s and conflicts with --consumable-shares=%s; "+
				"drop --gpu-sharing", SharingConsumable, slice.SharesMemory, o.ConsumableShares)
		}
		shares = slice.ConsumableShares{Mode: slice.SharesMemory}
	default:
		return fmt.Errorf("--gpu-sharing=%q: must be %q or %q (deprecated: use --consumable-shares)", o.GPUSharing, SharingExclusive, SharingConsumable)
	}
	if migMode == mig.ModeDynamic && shares.Enabled() {
		return fmt.Errorf("--consumable-shares=%s cannot be combined with --mig=%s: a GPU published for dynamic MIG consumes all its MIG counters "+
			"with every allocation, so it could not be shared; use --mig=static or --mig=off on nodes with consumable shares", shares, migMode)
	}
	o.shares = shares
	return nil
}

func (o *Options) sliceOptions() slice.Options {
	return slice.Options{MaxDevicesPerSlice: o.maxDevicesPerSlice(), ConsumableShares: o.shares,
		NVIDIAAttributes: o.names.Mode == compat.NVIDIA, NUMAList: o.NUMANodeAttribute == slice.NUMAList, Passthrough: o.Passthrough}
}

// logSharing logs the node's sharing mode, and that --gpu-sharing is
// deprecated where it is used.
func (o *Options) logSharing(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if o.GPUSharing == SharingConsumable {
		logger.Info("Deprecated flag: --gpu-sharing=consumable is --consumable-shares=memory; use that instead")
	}
	logger.Info("Consumable shares", "consumableShares", o.shares.String())
}

// sharingTools returns the time slicer and MPS control of the node.
func (o *Options) sharingTools(ctx context.Context) (sharing.TimeSlicer, *sharing.MPSControl, error) {
	env := toolEnv(o.roots().Driver)
	smi := sharing.NvidiaSMI{Path: o.tool(o.NvidiaSMIPath, "nvidia-smi"), Env: env}
	root := o.MPSRoot
	if root == "" {
		root = filepath.Join(o.PluginDataDir(), "mps")
	}
	mps, err := sharing.NewMPSControl(sharing.MPSOptions{
		ControlPath: o.tool(o.MPSControlPath, "nvidia-cuda-mps-control"), Root: root, Env: env})
	if err != nil {
		return nil, nil, err
	}
	o.logSharing(ctx)
	klog.FromContext(ctx).Info("GPU sharing tools", "nvidiaSMI", smi.Path,
		"mpsControl", o.tool(o.MPSControlPath, "nvidia-cuda-mps-control"), "mpsRoot", root, "env", env)
	return smi, mps, nil
}

// toolEnv is the environment of the driver's tools (nvmllib.ToolEnv).
func toolEnv(driverRoot string) []string { return nvmllib.ToolEnv(driverRoot) }

// tool resolves a helper binary: the flag, else the driver root's (the root
// as roots() reads it: an empty --nvidia-driver-root is /) or $PATH's
// (nvmllib.FindTool). It returns "" if none exists; prepares that need it
// then fail with a message naming the flag.
func (o *Options) tool(flag, name string) string {
	if flag != "" {
		return flag
	}
	return nvmllib.FindTool(o.roots().Driver, name)
}
