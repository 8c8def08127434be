package plugin

import (
	"context"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/fabricmanager"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// addFabricManagerFlag registers --fabric-manager-partitioning (chart
// kubeletPlugin.fabricManagerPartitioning, or NVIDIA's gate name
// featureGates.FabricManagerPartitioning).
func (o *Options) addFabricManagerFlag(fs *pflag.FlagSet) {
	fs.BoolVar(&o.FabricManagerPartitioning, "fabric-manager-partitioning", false,
		"NVSwitch Fabric Manager partitions (NVIDIA's alpha FabricManagerPartitioning gate): load libnvfm from the driver root, connect to "+
			"nvidia-fabricmanager in shared NVSwitch mode (<driver root>/run/nvidia-fabricmanager/socket, or $"+fabricmanager.UnixSocketEnv+
			", or TCP with $"+fabricmanager.AddressEnv+") and fail to start when it cannot; GPUs and vfio devices carry gpuModuleID and "+
			"partition<N> (the ID of the N-GPU partition holding the GPU); prepare of a claim of whole GPUs or vfio devices activates the "+
			"partition of exactly those GPUs (no such partition fails the claim), unprepare deactivates it. Skipped (logged) on a node "+
			"whose GPUs report no module ID (no HGX baseboard). Tested with a simulated Fabric Manager only.")
}

// openFabricManager connects to Fabric Manager when partitioning is on and
// records its partitions on the node's GPUs; nil when off, or when no GPU
// of the node has a module ID (not an NVSwitch baseboard: NVIDIA's driver
// skips Fabric Manager on a node without an NVSwitch fabric). The caller
// closes it.
func (o *Options) openFabricManager(ctx context.Context, node *model.Node) (*fabricmanager.Manager, error) {
	if !o.FabricManagerPartitioning {
		return nil, nil
	}
	baseboard := false
	for _, g := range node.GPUs {
		baseboard = baseboard || g.ModuleID > 0
	}
	if !baseboard {
		klog.FromContext(ctx).Info("Fabric Manager partitioning is on, but no GPU of this node reports a module ID (no NVSwitch baseboard): not using Fabric Manager")
		return nil, nil
	}
	fm, err := fabricmanager.Open(ctx, fabricmanager.Options{DriverRoot: o.roots().Driver,
		LockFile: filepath.Join(o.PluginDataDir(), "fabricmanager.lock")})
	if err != nil {
		return nil, err
	}
	node.FabricManager = true
	for i := range node.GPUs {
		if g := &node.GPUs[i]; g.ModuleID > 0 {
			g.FabricPartitions = fm.BySize(g.ModuleID)
		}
	}
	return fm, nil
}
