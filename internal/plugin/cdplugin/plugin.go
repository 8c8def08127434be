package cdplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/plugin/publishlock"
	"github.com/gpudra/gpudra/internal/shared/endpoints"
)

// informerResync is how often the ComputeDomain informers replay their
// domains (the node lists of daemon claims are rewritten then too).
const informerResync = 10 * time.Minute

// driver is the kubeletplugin.DRAPlugin of the channel driver: Claims'
// prepare and unprepare. Node keeps the claims in the records on disk
// (records, its Store), which another instance of the node (a rolling
// update's overlap) shares: a claim's record is written before its prepare
// labels the node and removed after its unprepare, and whether a domain's
// last claim on the node is gone is read from the records, under their
// lock, whichever instance prepared the claims.
type driver struct {
	claims *computedomain.Claims
	cancel context.CancelCauseFunc
}

var _ kubeletplugin.DRAPlugin = (*driver)(nil)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. A claim whose
// record cannot be written fails, which the kubelet retries (prepare is
// idempotent): a claim the plugin would forget would keep the node's
// domain label forever.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return d.claims.PrepareResourceClaims(ctx, claims)
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return d.claims.UnprepareResourceClaims(ctx, claims)
}

// HandleError implements kubeletplugin.DRAPlugin: background errors (the
// ResourceSlice publishing) are logged; unrecoverable ones stop the plugin.
func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.cancel != nil {
		d.cancel(fmt.Errorf("fatal background error: %s: %w", msg, err))
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin, which requires it:
// the channel driver reports no device health (and turns the service off,
// so the helper never calls it).
func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Plugin is a started channel driver plugin.
type Plugin struct {
	Helper *kubeletplugin.Helper
	Node   *computedomain.Node
	// CliqueID is the clique published at start (empty: none); the fabric
	// watch may publish another one later (Node.CliqueID).
	CliqueID string
	health   *healthServer
	lock     *publishlock.Lock
	stop     func()
	// stopWatch ends the fabric watch and waits for it.
	stopWatch func()
}

// Stop stops serving and the informers, then hands publishing over to
// another instance of the node (if one waits). Prepared claims stay
// prepared (recorded) for the next instance.
func (p *Plugin) Stop() {
	p.stopWatch()        // it publishes through the helper
	p.lock.StopWaiting() // no takeover through a stopping helper
	p.Helper.Stop()      // its ResourceSlice controller writes nothing more
	p.lock.Stop()
	p.health.close()
	p.stop()
}

// Run starts the plugin with clients from --kubeconfig (in-cluster when
// empty) and blocks until ctx is done or a fatal error occurs.
func Run(ctx context.Context, o *Options) error {
	if err := o.validateOnce(); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %q (set --kubeconfig or run in a pod): %w", o.Kubeconfig, err)
	}
	cfg.UserAgent = "gpu-kubelet-plugin-compute-domain"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create dynamic client: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p, err := Start(ctx, o, client, dyn, cancel)
	if err != nil {
		if errors.Is(context.Cause(ctx), context.Canceled) {
			return nil // stopped while it waited for the NVLink fabric: no failure
		}
		return err
	}
	defer p.Stop()
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// Start serves /healthz and /readyz, discovers the node's clique (waiting
// while the NVLink fabric registration of a GPU has not completed, see
// waitClique), checks the prepared claims' records, which Node reads from
// then on (converting a previous version's checkpoint.json first), starts the
// ComputeDomain informers, serves the kubelet's DRA API and publishes the
// node's channel and daemon devices, at once or, while another instance of
// the node holds the publish lock (a rolling update), once it stops. fatal
// is called for background errors that need a restart.
func Start(ctx context.Context, o *Options, client kubernetes.Interface, dyn dynamic.Interface, fatal context.CancelCauseFunc) (_ *Plugin, err error) {
	if err := o.validateOnce(); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	names := o.Names()
	if fi, err := os.Stat(o.KubeletRegistrarDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("kubelet plugin registration directory %s is missing: is the kubelet running with this root directory? (--kubelet-registrar-directory)", o.KubeletRegistrarDir)
	}
	dataDir := o.PluginDataDir()
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("create plugin directory: %w", err)
	}
	roots := nvmllib.DriverRoots(o.NvidiaDriverRoot, o.HostDriverRoot)
	hs, err := serveHealth(ctx, o.HealthAddress, o.healthListener)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			hs.close()
		}
	}()
	clique, gpus, err := waitClique(ctx, roots, o.FabricRetryInterval, hs)
	if err != nil {
		return nil, err
	}
	channels, err := computedomain.NewChannels(roots)
	if err != nil {
		return nil, err
	}
	gvrs, err := served(ctx, client.Discovery(), o.names)
	if err != nil {
		return nil, err
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, informerResync)
	domains, err := computedomain.NewDomains(factory, gvrs)
	if err != nil {
		return nil, err
	}
	domainsDir := filepath.Join(dataDir, "domains")
	recs := newRecords(dataDir, o.NodeName)
	node, err := computedomain.NewNode(computedomain.Config{
		NodeName: o.NodeName, Names: names, Client: client, Domains: domains, Channels: channels, ChannelCount: o.Channels,
		CliqueID: clique, DaemonNamespace: o.Namespace, DomainsDir: domainsDir, HostDomainsDir: domainsDir,
		HostDriverRoot: roots.HostDriver, FabricMgmt: fabricMgmt(ctx, roots, clique), ReadyWait: o.DaemonReadyWait,
		Store: recs,
	})
	if err != nil {
		return nil, err
	}
	restored, err := restoreRecords(ctx, recs, filepath.Join(dataDir, checkpointFile))
	if err != nil {
		return nil, err
	}
	claims, err := computedomain.NewClaims(node, o.CDIRoot)
	if err != nil {
		return nil, err
	}
	deviceOpts := computedomain.DeviceOptions{Channels: o.Channels, CliqueID: clique, MaxDevicesPerSlice: o.MaxDevicesPerSlice}
	resources, err := computedomain.Resources(o.NodeName, deviceOpts)
	if err != nil {
		return nil, err
	}

	// The informers: node lists follow the domains' status.
	if err := domains.SyncNodesOnChange(ctx, node); err != nil {
		return nil, err
	}
	stopInformers := make(chan struct{})
	factory.Start(stopInformers)
	stop := func() {
		close(stopInformers)
		factory.Shutdown()
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), domains.HasSynced) {
		return nil, fmt.Errorf("ComputeDomain informers did not sync: %w", context.Cause(ctx))
	}

	d := &driver{claims: claims, cancel: fatal}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(names.Driver),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(o.KubeletRegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.RegistrarListener(endpoints.PrivateSocket),
		kubeletplugin.PluginListener(endpoints.PrivateSocket),
		// Calls run concurrently: a channel claim's prepare waits up to
		// --daemon-ready-wait for the domain's daemon on this node, whose
		// own claim must be prepared meanwhile. Node orders its label
		// and node list changes with the claims' records under the
		// records' lock, which the other instance of a rolling update
		// takes too.
		kubeletplugin.Serialize(false),
		// The channel driver reports no device health.
		kubeletplugin.HealthService(false),
	}
	if o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(o.PodUID)))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return nil, fmt.Errorf("start kubelet plugin: %w", err)
	}
	// One publisher per node and driver: during a rolling update the old
	// pod keeps publishing until it exits; this one serves the kubelet
	// meanwhile and publishes once it holds the lock.
	pub := &channelPublisher{helper: helper, res: resources}
	lock, err := publishlock.Start(ctx, publishlock.Config{Dir: dataDir, PodUID: o.PodUID,
		Lead: func(ctx context.Context) error {
			if err := pub.lead(ctx); err != nil {
				return fmt.Errorf("publish the IMEX channel devices: %w", err)
			}
			return nil
		},
		Resign: pub.resign})
	if err != nil {
		helper.Stop()
		return nil, err
	}
	hs.setHelper(helper)
	// After start, the fabric is read again: a registration that starts
	// over withdraws the channels, a new clique republishes them.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	if w := newFabricWatch(ctx, roots, gpus, o.FabricRetryInterval, node, pub, hs, o.NodeName, deviceOpts); w != nil {
		watching.Go(func() { w.run(watchCtx) })
	}
	stopWatching := func() {
		stopWatch()
		watching.Wait()
	}
	logger.Info("compute-domain kubelet plugin running", "node", o.NodeName, "driver", names.Driver, "cliqueID", clique,
		"channels", o.Channels, "restoredClaims", len(restored), "computeDomainVersions", len(gvrs), "dataDir", dataDir)
	return &Plugin{Helper: helper, Node: node, CliqueID: clique, health: hs, lock: lock, stop: stop, stopWatch: stopWatching}, nil
}

// restoreRecords converts a previous version's checkpoint.json at
// checkpoint into records (under the records' lock: another instance may
// be writing records) and reads the records, refusing any it cannot trust;
// Node reads them from disk from then on.
func restoreRecords(ctx context.Context, recs records, checkpoint string) ([]computedomain.PreparedClaim, error) {
	unlock, err := recs.Lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := recs.migrateCheckpoint(ctx, checkpoint); err != nil {
		return nil, err
	}
	return recs.load(ctx)
}
