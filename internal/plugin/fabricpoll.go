package plugin

import (
	"context"
	"reflect"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// DefaultFabricPollInterval is --fabric-poll-interval's default.
const DefaultFabricPollInterval = 30 * time.Second

func (o *Options) addFabricFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.FabricPollInterval, "fabric-poll-interval", DefaultFabricPollInterval,
		"How often the NVLink fabric (registration, clique, health) of GPUs attached to a multi-node NVLink fabric (GB200 NVL72) is read "+
			"again; a change of their cliqueID or fabricBandwidthDegraded attribute is published. Nodes whose GPUs have no such fabric "+
			"never read it again. 0: read once, at start.")
}

// fabricPoller reads the NVLink fabric of the node's fabric-capable GPUs
// again every interval (the GPU's registration completes after the plugin
// started, fails or starts over after a GPU reset or a Fabric Manager
// restart, its clique changes, its bandwidth becomes degraded) and, when
// the attributes the fabric gives a GPU change, publishes the devices
// again as a fresh start would build them from the same NVML answers:
// discovery's fabric code reads, slice.Resources builds.
type fabricPoller struct {
	interval time.Duration
	reader   *discovery.FabricReader
	pub      *publisher
	nodeName string
	opts     slice.Options
	// node is what the published devices were built from: a copy of the
	// discovered node (the prepare manager reads that one concurrently)
	// whose GPUs' fabric the poll replaces.
	node model.Node
	// polled are the indexes of node.GPUs whose fabric is read again: the
	// reachable GPUs whose fabric NVML answered at start with a state
	// other than not-supported.
	polled []int
}

// newFabricPoller returns nil when the poll is off or no GPU of the node
// is fabric-capable: ordinary nodes never read the fabric again.
func newFabricPoller(o *Options, gpus *GPUNode, pub *publisher) *fabricPoller {
	if o.FabricPollInterval <= 0 {
		return nil
	}
	fp := &fabricPoller{interval: o.FabricPollInterval, pub: pub, nodeName: o.NodeName, opts: o.sliceOptions(), node: *gpus.Node}
	fp.node.GPUs = slices.Clone(gpus.Node.GPUs)
	for i, g := range fp.node.GPUs {
		if g.Unreachable == "" && discovery.FabricCapable(g.Fabric) {
			fp.polled = append(fp.polled, i)
		}
	}
	if len(fp.polled) == 0 {
		return nil
	}
	fp.reader = discovery.NewFabricReader(gpus.Lib)
	return fp
}

// run polls until ctx is done.
func (fp *fabricPoller) run(ctx context.Context) {
	klog.FromContext(ctx).V(2).Info("Reading the NVLink fabric of the node's GPUs periodically", "gpus", len(fp.polled), "interval", fp.interval)
	_ = wait.PollUntilContextCancel(ctx, fp.interval, false, func(ctx context.Context) (bool, error) {
		fp.poll(ctx)
		return false, nil
	})
}

// poll reads the fabric of the polled GPUs once and publishes the devices
// again if the attributes of any changed; it reports whether it did. A GPU
// that does not answer keeps what is published (the health monitor taints
// it).
func (fp *fabricPoller) poll(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	gpus := slices.Clone(fp.node.GPUs)
	changed := false
	for _, i := range fp.polled {
		g := &gpus[i]
		f, err := fp.reader.Read(ctx, g.UUID)
		if err != nil {
			logger.V(4).Info("NVLink fabric not read again, keeping the GPU's published attributes", "gpu", g.DeviceName(), "uuid", g.UUID, "err", err)
			continue
		}
		before, after := slice.FabricAttributes(g.Fabric), slice.FabricAttributes(f)
		if !reflect.DeepEqual(before, after) {
			changed = true
			logger.Info("NVLink fabric of a GPU changed, publishing its new attributes", "gpu", g.DeviceName(), "uuid", g.UUID,
				"clique", f.Clique(), "previousClique", g.Fabric.Clique(),
				"bandwidthDegraded", degradedOf(f), "previousBandwidthDegraded", degradedOf(g.Fabric),
				"fabricState", stateOf(f), "fabricError", errorOf(f))
		}
		g.Fabric = f
	}
	if !changed {
		fp.node.GPUs = gpus
		return false
	}
	next := fp.node
	next.GPUs = gpus
	res, err := slice.Resources(fp.nodeName, &next, fp.opts)
	if err != nil {
		// The same build succeeded at start; only a fabric attribute
		// differs. Keep what is published and try again at the next poll.
		logger.Error(err, "Building the ResourceSlice with the new NVLink fabric attributes failed; keeping the published one")
		return false
	}
	fp.node = next
	if err := fp.pub.SetBase(ctx, res); err != nil {
		logger.Error(err, "Publishing the new NVLink fabric attributes failed")
	}
	return true
}

func degradedOf(f *model.Fabric) any {
	if f == nil {
		return nil
	}
	if d, ok := f.Health[model.FabricDegradedBandwidth]; ok {
		return d
	}
	return nil
}

func stateOf(f *model.Fabric) model.FabricState {
	if f == nil {
		return model.FabricNotSupported
	}
	return f.State
}

func errorOf(f *model.Fabric) string {
	if f == nil {
		return ""
	}
	return f.Error
}
