package plugin

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/fabricmanager"
	"github.com/gpudra/gpudra/internal/plugin/inventory"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// GPUNode is an opened NVML backend and what was discovered through it.
type GPUNode struct {
	Lib  nvml.Interface
	Node *model.Node
	// fm is the Fabric Manager connection (fabricpartitions.go); nil when
	// partitioning is off. Close closes it.
	fm *fabricmanager.Manager
}

// fabricPartitions is the prepare manager's view of fm (a nil interface,
// not a nil pointer, when off).
func (n *GPUNode) fabricPartitions() prepare.FabricPartitions {
	if n.fm == nil {
		return nil
	}
	return n.fm
}

// OpenNode opens NVML under the driver root and discovers the node's GPUs;
// GPUs that do not answer are only listed (node.Unavailable). Close it
// with Close.
func OpenNode(ctx context.Context, o *Options) (*GPUNode, error) { return openNode(ctx, o, nil) }

// openNode is OpenNode; with inv, a GPU that does not answer is published
// from its last known identity or withheld, and inv remembers what was
// discovered (internal/plugin/inventory).
func openNode(ctx context.Context, o *Options, inv *inventory.Store) (*GPUNode, error) {
	roots := o.roots()
	lib, err := nvmllib.New(roots.Driver)
	if err != nil {
		return nil, err
	}
	node, err := discovery.Discover(ctx, lib, discovery.Options{SysfsRoot: roots.Sys})
	if err != nil {
		_ = lib.Shutdown() // already failing; the discovery error is the one to report
		return nil, fmt.Errorf("discover GPUs: %w", err)
	}
	if inv != nil {
		inventory.Restore(ctx, inv, node)
	}
	mode, err := mig.ParseMode(o.MIG)
	if err != nil {
		_ = lib.Shutdown()
		return nil, err
	}
	mig.Apply(node, mode)
	mig.RestrictProfiles(ctx, node, o.MIGProfiles)
	if err := o.detectIOMMUFD(ctx, node); err != nil {
		_ = lib.Shutdown()
		return nil, err
	}
	if o.names.Mode == compat.NVIDIA {
		// MIG devices are named as NVIDIA's driver names them, with the
		// GPU instance profile ID.
		for i := range node.GPUs {
			node.GPUs[i].MIGNaming = model.NVIDIAMIGNames
		}
	}
	klog.FromContext(ctx).Info("Discovered GPUs", "mig", mode, "count", len(node.GPUs), "unavailable", len(node.Unavailable),
		"driverVersion", node.DriverVersion, "cudaDriverVersion", node.CUDADriverVersion, "driverRoot", roots.Driver, "hostDriverRoot", roots.HostDriver)
	return &GPUNode{Lib: lib, Node: node}, nil
}

// roots is the layout of the driver root (see nvmllib.DriverRoots).
func (o *Options) roots() nvmllib.Roots {
	return nvmllib.DriverRoots(o.NvidiaDriverRoot, o.HostDriverRoot)
}

// Close shuts NVML down.
func (n *GPUNode) Close() {
	if n.fm != nil {
		if err := n.fm.Close(); err != nil {
			klog.Background().Error(err, "Fabric Manager library shutdown failed")
		}
	}
	if ret := n.Lib.Shutdown(); ret != nvml.SUCCESS {
		klog.Background().Error(ret, "NVML shutdown failed")
	}
}

// Edits returns the CDI edits of the node's GPUs, found by NVIDIA's nvcdi
// under the driver root and named as the host sees them. Computed once. A
// GPU whose edits fail (it fell off the bus since discovery) becomes
// unreachable: published tainted lost, never prepared, never fatal.
func (n *GPUNode) Edits(ctx context.Context, o *Options) (*cdi.CachedEdits, error) {
	hook, err := o.cdiHookPath(ctx)
	if err != nil {
		return nil, err
	}
	p, err := cdi.NewNvcdiEdits(ctx, n.Lib, cdi.OptionsFor(o.roots(), hook))
	if err != nil {
		return nil, err
	}
	edits, err := cdi.NewCachedEdits(p, n.Node.GPUs)
	if err != nil {
		return nil, err
	}
	for i := range n.Node.GPUs {
		g := &n.Node.GPUs[i]
		if err := edits.Failed()[g.UUID]; err != nil {
			g.Unreachable = discovery.LostReason(err)
			klog.FromContext(ctx).Error(err, "GPU published as unreachable", "gpu", g.DeviceName(), "uuid", g.UUID, "reason", g.Unreachable)
		}
	}
	return edits, nil
}

// EnableMIG lets the CDI writer describe MIG devices when the node publishes
// any, from the driver's table of MIG capability devices.
func (n *GPUNode) EnableMIG(o *Options, w *cdi.Writer) error {
	needed := false
	for _, g := range n.Node.GPUs {
		needed = needed || g.Partitioning != model.WholeGPU
	}
	if !needed {
		return nil
	}
	r := o.roots()
	caps, err := cdi.NewProcMIGCaps(r.Proc, r.HostDev)
	if err != nil {
		return fmt.Errorf("MIG devices are published but their capability device nodes are unknown: %w", err)
	}
	w.SetMIGCaps(caps)
	return nil
}
