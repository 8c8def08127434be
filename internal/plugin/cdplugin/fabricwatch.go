package cdplugin

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	gpudiscovery "github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
)

// channelPublisher holds the devices the node publishes and publishes them
// through the helper while this instance holds the node's publish lock.
type channelPublisher struct {
	mu      sync.Mutex
	helper  *kubeletplugin.Helper
	leading bool
	res     resourceslice.DriverResources
}

// lead publishes the current devices from now on (publishlock's Lead).
func (p *channelPublisher) lead(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leading = true
	return p.helper.PublishResources(ctx, p.res)
}

// resign publishes nothing more (publishlock's Resign).
func (p *channelPublisher) resign() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leading = false
}

// set replaces the devices and publishes them if leading.
func (p *channelPublisher) set(ctx context.Context, res resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res = res
	if !p.leading {
		return nil
	}
	return p.helper.PublishResources(ctx, res)
}

// fabricWatch reads the NVLink fabric of the node's GPUs again every
// interval after the plugin started and keeps what the node offers right:
//
//   - a registration that is pending again (not-started, in-progress: a GPU
//     reset, a Fabric Manager restart) or failed, or GPUs in two cliques:
//     the channel devices are withdrawn (the daemon device stays, with the
//     last clique, so that the domains' status keeps this node's clique and
//     a running domain's daemon can be scheduled again), /readyz fails with
//     the GPUs and what to check; prepared claims keep working and are
//     unprepared as always;
//   - a valid clique again: the channels are published again;
//   - another clique: Node's clique is replaced (claims prepared from now
//     on see it) and every device is published in the new clique.
//
// The fabric is read by discovery's code and judged by NodeClique, as at
// start.
type fabricWatch struct {
	interval time.Duration
	roots    nvmllib.Roots
	// release gives the NVML library back (openNVML).
	release  func(context.Context)
	reader   *gpudiscovery.FabricReader
	gpus     []model.GPU
	node     *computedomain.Node
	pub      *channelPublisher
	hs       *healthServer
	poolName string
	opts     computedomain.DeviceOptions
	// problem is why the channels are withdrawn (empty: they are not).
	problem string
}

// newFabricWatch opens NVML for the watch of gpus, the GPUs the start
// discovered; nil when there is nothing to watch: no NVML, or no GPU whose
// fabric NVML reports (NOT_SUPPORTED), so ordinary nodes never read it
// again. Close it with close.
func newFabricWatch(ctx context.Context, roots nvmllib.Roots, gpus []model.GPU, interval time.Duration, node *computedomain.Node,
	pub *channelPublisher, hs *healthServer, poolName string, opts computedomain.DeviceOptions) *fabricWatch {
	logger := klog.FromContext(ctx)
	if interval <= 0 {
		return nil
	}
	var capable []model.GPU
	for _, g := range gpus {
		if gpudiscovery.FabricCapable(g.Fabric) {
			capable = append(capable, g)
		}
	}
	if len(capable) == 0 {
		return nil
	}
	lib, release, err := openNVML(roots.Driver)
	if err != nil {
		logger.V(2).Info("No NVML: the NVLink fabric is not watched", "err", err)
		return nil
	}
	w := &fabricWatch{interval: interval, roots: roots, release: release, node: node, pub: pub, hs: hs, poolName: poolName, opts: opts,
		gpus: capable}
	w.reader = gpudiscovery.NewFabricReader(lib)
	return w
}

func (w *fabricWatch) close(ctx context.Context) { w.release(ctx) }

// run watches until ctx is done, then closes NVML.
func (w *fabricWatch) run(ctx context.Context) {
	defer w.close(ctx)
	klog.FromContext(ctx).V(2).Info("Watching the NVLink fabric of the node's GPUs", "gpus", len(w.gpus), "interval", w.interval,
		"cliqueID", w.opts.CliqueID)
	_ = wait.PollUntilContextCancel(ctx, w.interval, false, func(ctx context.Context) (bool, error) {
		w.poll(ctx)
		return false, nil
	})
}

// poll reads the fabric once and acts on a change (see fabricWatch).
func (w *fabricWatch) poll(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for i := range w.gpus {
		g := &w.gpus[i]
		f, err := w.reader.Read(ctx, g.UUID)
		if err != nil {
			// A GPU that does not answer keeps its last fabric: the GPU
			// plugin's health monitor reports it.
			logger.V(4).Info("NVLink fabric not read again", "gpu", g.DeviceName(), "uuid", g.UUID, "err", err)
			continue
		}
		g.Fabric = f
	}
	clique, err := computedomain.NodeClique(w.gpus)
	switch {
	case err != nil:
		msg := err.Error()
		if msg == w.problem {
			return
		}
		withdraw := w.problem == ""
		w.problem = msg
		if errors.Is(err, computedomain.ErrFabricPending) {
			msg = "the NVLink fabric registration of the node's GPUs started over: not publishing IMEX channels until it completes: " + msg +
				"; if this lasts, check the NVIDIA Fabric Manager (nvidia-fabricmanager) and the NVLink connections (nvidia-smi -q, section Fabric)"
		} else {
			msg = "the NVLink fabric of the node's GPUs is no longer usable: not publishing IMEX channels: " + msg
		}
		logger.Info("Withdrawing the node's IMEX channels: "+msg, "cliqueID", w.opts.CliqueID, "retryInterval", w.interval)
		w.hs.setFabricProblem(msg)
		if withdraw {
			w.publish(ctx, false)
		}
	case clique != w.opts.CliqueID:
		logger.Info("The NVLink clique of the node's GPUs changed: publishing the IMEX channels in the new clique; "+
			"new claims are allocated and prepared by it, prepared claims are left as they are",
			"cliqueID", clique, "previousCliqueID", w.opts.CliqueID)
		w.node.SetClique(clique, fabricMgmt(ctx, w.roots, clique))
		w.opts.CliqueID = clique
		w.problem = ""
		w.hs.setFabricProblem("")
		w.publish(ctx, true)
	case w.problem != "":
		logger.Info("The NVLink fabric of the node's GPUs is usable again: publishing the IMEX channels", "cliqueID", clique)
		w.problem = ""
		w.hs.setFabricProblem("")
		w.publish(ctx, true)
	}
}

// publish publishes the node's devices: every channel and the daemon
// device, or the daemon device alone.
func (w *fabricWatch) publish(ctx context.Context, channels bool) {
	res := computedomain.DaemonResources(w.poolName, w.opts)
	var err error
	if channels {
		res, err = computedomain.Resources(w.poolName, w.opts)
	}
	if err == nil {
		err = w.pub.set(ctx, res)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Publishing the IMEX channel devices failed")
	}
}
