package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// GPU sharing modes of a node (--gpu-sharing).
const (
	// SharingExclusive publishes each GPU for one claim at a time.
	SharingExclusive = "exclusive"
	// SharingConsumable publishes each GPU as consumable memory shares.
	SharingConsumable = "consumable"
)

func (o *Options) addGPUSharingFlag(fs *pflag.FlagSet) {
	fs.StringVar(&o.GPUSharing, "gpu-sharing", SharingExclusive,
		"How this node's GPUs are published: 'exclusive' (one claim per GPU, unless claims share one ResourceClaim) or "+
			"'consumable' (allowMultipleAllocations: several claims each get capacity.requests.memory of one GPU, "+
			"enforced through an MPS pinned-memory limit).")
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
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.CheckMPSDaemons(ctx)
		}
	}
}

func (o *Options) validateSharing() error {
	switch o.GPUSharing {
	case "", SharingExclusive, SharingConsumable:
		return nil
	default:
		return fmt.Errorf("--gpu-sharing=%q: must be %q or %q", o.GPUSharing, SharingExclusive, SharingConsumable)
	}
}

func (o *Options) sliceOptions() slice.Options {
	return slice.Options{MaxDevicesPerSlice: o.maxDevicesPerSlice(), ConsumableMemory: o.GPUSharing == SharingConsumable,
		NVIDIAAttributes: o.names.Mode == compat.NVIDIA, NUMAList: o.NUMANodeAttribute == slice.NUMAList}
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
	klog.FromContext(ctx).Info("GPU sharing tools", "gpuSharing", o.GPUSharing, "nvidiaSMI", smi.Path,
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
