package plugin

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/cdi"
	"github.com/gpudra/gpudra/pkg/discovery"
	"github.com/gpudra/gpudra/pkg/mig"
	"github.com/gpudra/gpudra/pkg/model"
	"github.com/gpudra/gpudra/pkg/nvmllib"
)

// GPUNode is an opened NVML backend and what was discovered through it.
type GPUNode struct {
	Lib  nvml.Interface
	Node *model.Node
}

// OpenNode opens the real or simulated NVML and discovers the node's GPUs.
// Close it with Close.
func OpenNode(ctx context.Context, o *Options) (*GPUNode, error) {
	lib, err := nvmllib.New(nvmllib.Options{
		DriverRoot:       o.NvidiaDriverRoot,
		Simulate:         o.Simulate,
		ProfileDirs:      o.ProfileDirs,
		NodeName:         o.NodeName,
		SimStateFile:     o.simStateFile(),
		SimStateReadOnly: o.inspectOnly,
	})
	if err != nil {
		return nil, err
	}
	node, err := discovery.Discover(ctx, lib, discovery.Options{})
	if err != nil {
		_ = lib.Shutdown() // already failing; the discovery error is the one to report
		return nil, fmt.Errorf("discover GPUs: %w", err)
	}
	mode, err := mig.ParseMode(o.MIG)
	if err != nil {
		_ = lib.Shutdown()
		return nil, err
	}
	mig.Apply(node, mode)
	mig.RestrictProfiles(ctx, node, o.MIGProfiles)
	klog.FromContext(ctx).Info("Discovered GPUs", "mig", mode, "count", len(node.GPUs), "driverVersion", node.DriverVersion,
		"cudaDriverVersion", node.CUDADriverVersion, "simulated", o.Simulate != "")
	return &GPUNode{Lib: lib, Node: node}, nil
}

// Close shuts NVML down.
func (n *GPUNode) Close() {
	if ret := n.Lib.Shutdown(); ret != nvml.SUCCESS {
		klog.Background().Error(ret, "NVML shutdown failed")
	}
}

// Edits returns the CDI edits provider for the node: nvcdi's view of the
// driver on real nodes, synthesized device nodes in simulation. Computed once.
func (n *GPUNode) Edits(o *Options) (*cdi.CachedEdits, error) {
	var p cdi.EditsProvider = cdi.SimulatedEdits{}
	if o.Simulate == "" {
		real, err := cdi.NewNvcdiEdits(n.Lib, cdi.NvcdiOptions{DriverRoot: o.NvidiaDriverRoot, HookPath: o.NvidiaCDIHookPath})
		if err != nil {
			return nil, err
		}
		p = real
	}
	return cdi.NewCachedEdits(p, n.Node.GPUs)
}

// simStateFile is where the simulated MIG state lives: the flag, or by
// default in the plugin's directory (not for inspect, which only reads).
func (o *Options) simStateFile() string {
	if o.SimStateFile != "" || o.inspectOnly || o.Simulate == "" {
		return o.SimStateFile
	}
	return filepath.Join(o.PluginDataDir(), "simulated-nvml.json")
}

// EnableMIG lets the CDI writer describe MIG devices when the node publishes
// any: simulated capability nodes, or the driver's table on a real node.
func (n *GPUNode) EnableMIG(o *Options, w *cdi.Writer) error {
	needed := false
	for _, g := range n.Node.GPUs {
		needed = needed || g.Partitioning != model.WholeGPU
	}
	switch {
	case !needed:
		return nil
	case o.Simulate != "":
		w.SetMIGCaps(cdi.SimulatedMIGCaps{})
		return nil
	}
	caps, err := cdi.NewProcMIGCaps("/proc")
	if err != nil {
		return fmt.Errorf("MIG devices are published but their capability device nodes are unknown: %w", err)
	}
	w.SetMIGCaps(caps)
	return nil
}
