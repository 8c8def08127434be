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
// prepare and unprepare, then the record of each claim of the call.
type driver struct {
	claims *computedomain.Claims
	node   *computedomain.Node
	// records holds one record per prepared claim; mu orders reading a
	// claim from node with writing or removing its record.
	records records
	mu      sync.Mutex
	cancel  context.CancelCauseFunc
}

var _ kubeletplugin.DRAPlugin = (*driver)(nil)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. Each claim Node
// holds afterwards (prepared, or labelled and waiting for its daemon) gets
// its record written. A record that cannot be written fails that claim,
// which the kubelet retries (prepare is idempotent): a claim the plugin
// would forget on restart would keep the node's domain label forever.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	res, err := d.claims.PrepareResourceClaims(ctx, claims)
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		if err := d.record(c.UID, false); err != nil {
			r := res[c.UID]
			res[c.UID] = kubeletplugin.PrepareResult{Err: errors.Join(r.Err, err)}
		}
	}
	return res, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. It first
// takes over the records of claims Node does not hold (prepared by another
// instance of the node during a rolling update), so that their unprepare
// removes the label and node list they hold and another domain claim's
// unprepare leaves those in place; then it removes the record of each
// claim unprepared.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.adopt(ctx)
	res, err := d.claims.UnprepareResourceClaims(ctx, claims)
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		if res[c.UID] != nil {
			continue // the claim and its record stay; the kubelet retries
		}
		if err := d.record(c.UID, true); err != nil {
			res[c.UID] = err
		}
	}
	return res, nil
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

// record writes the record of claim uid if Node holds it; if Node does not
// and the claim was unprepared, it removes the record. A prepare that left
// nothing in Node leaves the record alone: it may be another instance's.
func (d *driver) record(uid types.UID, unprepared bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.node.PreparedClaim(uid)
	switch {
	case ok:
		return d.records.put(c)
	case unprepared:
		return d.records.remove(uid)
	}
	return nil
}

// adopt gives Node the recorded claims it does not hold. A record it
// cannot read is logged: the claims Node holds are unprepared as before.
func (d *driver) adopt(ctx context.Context) {
	logger := klog.FromContext(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	recorded, err := d.records.load(ctx)
	if err != nil {
		logger.Error(err, "Cannot take over the claims other instances of the plugin prepared")
		return
	}
	var adopted []computedomain.PreparedClaim
	for _, c := range recorded {
		if _, ok := d.node.PreparedClaim(c.UID); !ok {
			adopted = append(adopted, c)
		}
	}
	if len(adopted) > 0 {
		d.node.Restore(adopted)
		logger.Info("Took over prepared claims recorded by another instance of the plugin", "claims", adopted)
	}
}

// Plugin is a started channel driver plugin.
type Plugin struct {
	Helper *kubeletplugin.Helper
	Node   *computedomain.Node
	// CliqueID is the clique published (empty: none).
	CliqueID string
	health   *healthServer
	lock     *publishlock.Lock
	stop     func()
}

// Stop stops serving and the informers, then hands publishing over to
// another instance of the node (if one waits). Prepared claims stay
// prepared (recorded) for the next instance.
func (p *Plugin) Stop() {
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
// waitClique), restores the prepared claims' records
// (converting a previous version's checkpoint.json first), starts the
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
	clique, err := waitClique(ctx, roots, o.FabricRetryInterval, hs)
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
	node, err := computedomain.NewNode(computedomain.Config{
		NodeName: o.NodeName, Names: names, Client: client, Domains: domains, Channels: channels, ChannelCount: o.Channels,
		CliqueID: clique, DaemonNamespace: o.Namespace, DomainsDir: domainsDir, HostDomainsDir: domainsDir,
		HostDriverRoot: roots.HostDriver, FabricMgmt: fabricMgmt(ctx, roots, clique), ReadyWait: o.DaemonReadyWait,
	})
	if err != nil {
		return nil, err
	}
	recs := records{dir: filepath.Join(dataDir, recordsDir), node: o.NodeName}
	if err := recs.migrateCheckpoint(ctx, filepath.Join(dataDir, checkpointFile)); err != nil {
		return nil, err
	}
	restored, err := recs.load(ctx)
	if err != nil {
		return nil, err
	}
	node.Restore(restored)
	claims, err := computedomain.NewClaims(node, o.CDIRoot)
	if err != nil {
		return nil, err
	}
	resources, err := computedomain.Resources(o.NodeName, computedomain.DeviceOptions{Channels: o.Channels, CliqueID: clique,
		MaxDevicesPerSlice: o.MaxDevicesPerSlice})
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

	d := &driver{claims: claims, node: node, records: recs, cancel: fatal}
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
		// changes and claims itself; each claim's record is written or
		// removed (under mu) from Node's state after the call's change.
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
	lock, err := publishlock.Start(ctx, publishlock.Config{Dir: dataDir, PodUID: o.PodUID,
		Lead: func(ctx context.Context) error {
			if err := helper.PublishResources(ctx, resources); err != nil {
				return fmt.Errorf("publish the IMEX channel devices: %w", err)
			}
			return nil
		}})
	if err != nil {
		helper.Stop()
		return nil, err
	}
	hs.setHelper(helper)
	logger.Info("compute-domain kubelet plugin running", "node", o.NodeName, "driver", names.Driver, "cliqueID", clique,
		"channels", o.Channels, "restoredClaims", len(restored), "computeDomainVersions", len(gvrs), "dataDir", dataDir)
	return &Plugin{Helper: helper, Node: node, CliqueID: clique, health: hs, lock: lock, stop: stop}, nil
}
