package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/inventory"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/endpoints"
)

// Driver implements kubeletplugin.DRAPlugin on top of the prepare manager.
type Driver struct {
	manager *prepare.Manager
	cancel  context.CancelCauseFunc
	// health, status, events and telemetry are optional (nil: off); see
	// health.go, claimstatus.go, events.go, telemetry.go.
	health    *healthService
	status    *claimStatus
	events    *eventSink
	telemetry *telemetryService
	// mpsCheckInterval: see superviseMPS (0: off).
	mpsCheckInterval time.Duration
	// fabric reads the GPUs' NVLink fabric again (fabricpoll.go); nil: off.
	fabric *fabricPoller
	// background counts the loops startBackground starts besides health
	// (the telemetry sampler, the MPS check).
	background sync.WaitGroup
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := d.manager.PrepareClaims(ctx, claims)
	d.afterPrepare(claims, results)
	return results, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := d.manager.UnprepareClaims(ctx, claims)
	d.afterUnprepare(claims, results)
	return results, nil
}

// HandleError implements kubeletplugin.DRAPlugin: background errors (e.g.
// ResourceSlice publishing) are logged; unrecoverable ones stop the plugin.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.cancel != nil {
		d.cancel(fmt.Errorf("fatal background error: %s: %w", msg, err))
	}
}

// Run starts the plugin and blocks until ctx is done or a fatal error
// occurs. o is validated unless Validate has already run (the command runs
// it before Run, so that names are resolved once).
func Run(ctx context.Context, o *Options) error {
	if err := o.validateOnce(); err != nil {
		return err
	}
	client, err := kubeClient(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p, err := Start(ctx, o, client, cancel)
	if err != nil {
		return err
	}
	defer p.Stop()
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// Plugin is a started kubelet plugin.
type Plugin struct {
	Helper  *kubeletplugin.Helper
	Manager *prepare.Manager
	// MetricsAddr is where /metrics is served; nil when disabled.
	MetricsAddr net.Addr
	gpus        *GPUNode
	leader      *sliceLeader
	// stopBackground ends the health monitor and the other background
	// work and waits for the monitor.
	stopBackground func()
}

// Stop stops serving, hands publishing over to another instance of the
// node (if one waits) and releases NVML. Prepared claims stay prepared.
func (p *Plugin) Stop() {
	p.leader.stopWaiting() // no takeover through a stopping helper
	p.Helper.Stop()
	// The health monitor calls NVML: it ends before NVML is shut down.
	p.stopBackground()
	p.leader.stop()
	p.gpus.Close()
}

// Start discovers the GPUs, recovers the checkpoint, serves the kubelet's
// DRA API and starts publishing the node's ResourceSlice. fatal is called
// for background errors that need a restart. o is validated unless
// Validate has already run.
func Start(ctx context.Context, o *Options, client kubernetes.Interface, fatal context.CancelCauseFunc) (_ *Plugin, err error) {
	if err := o.validateOnce(); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	if fi, err := os.Stat(o.KubeletRegistrarDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("kubelet plugin registration directory %s is missing: is the kubelet running with this root directory? (--kubelet-registrar-directory)", o.KubeletRegistrarDir)
	}
	if err := os.MkdirAll(o.PluginDataDir(), 0o750); err != nil {
		return nil, fmt.Errorf("create plugin directory: %w", err)
	}
	gpus, err := openNode(ctx, o, inventory.New(o.PluginDataDir(), o.NodeName))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			gpus.Close()
		}
	}()
	fm, err := o.openFabricManager(ctx, gpus.Node)
	if err != nil {
		return nil, err
	}
	gpus.fm = fm
	edits, err := gpus.Edits(ctx, o)
	if err != nil {
		return nil, err
	}
	writer, err := cdi.NewVendorWriter(o.CDIRoot, o.names.CDIVendor, edits)
	if err != nil {
		return nil, err
	}
	if err := gpus.EnableMIG(o, writer); err != nil {
		return nil, err
	}
	store, err := checkpoint.Open(checkpoint.Options{Dir: o.CheckpointDir(), SyncDir: o.CheckpointSyncDir})
	if err != nil {
		return nil, err
	}
	slicer, mps, err := o.sharingTools(ctx)
	if err != nil {
		return nil, err
	}
	if err := o.configureMPS(ctx, mps, client); err != nil {
		return nil, err
	}
	// Events first: recovery reports MPS daemons it had to start again.
	events := newEventSink(ctx, client, o, prepare.NewPrepared(store))
	manager, err := prepare.New(prepare.Config{
		Names: o.names, PoolName: o.NodeName, Node: gpus.Node, Checkpoints: store, CDI: writer,
		LockDir: filepath.Join(o.PluginDataDir(), "locks"), MIG: mig.NewManager(gpus.Lib), TimeSlicer: slicer, MPS: mps,
		ComputeMode: sharing.NVMLComputeMode{Lib: gpus.Lib},
		OnMPSDaemon: events.mpsDaemon, Passthrough: o.passthrough(gpus.Lib, gpus.Node.IOMMUFD), SyncRecords: o.CheckpointSync,
		FabricPartitions: gpus.fabricPartitions(),
	})
	if err != nil {
		return nil, err
	}
	recovered, err := manager.Recover(ctx)
	if err != nil {
		return nil, err
	}
	pub := &publisher{names: o.names}
	hs, err := newHealthService(ctx, o, gpus, pub, o.passedThrough(gpus.Node, manager.Prepared()))
	if err != nil {
		return nil, err
	}
	tel := newTelemetryService(o, gpus, store, client)
	tel.watchXIDs(hs)
	pm := newPluginMetrics()
	var metricsAddr net.Addr
	reg8n := &registration{}
	if o.MetricsAddress != "" {
		if metricsAddr, err = serveMetrics(ctx, o, client, manager, hs, reg8n, tel, pm); err != nil {
			return nil, err
		}
	}
	resources, err := slice.Resources(o.NodeName, gpus.Node, o.sliceOptions())
	if err != nil {
		return nil, fmt.Errorf("build ResourceSlice: %w", err)
	}
	driver := &Driver{manager: manager, cancel: fatal, health: hs, events: events,
		status: newClaimStatus(client, o, manager.Prepared(), pub, pm), mpsCheckInterval: o.MPSCheckInterval, telemetry: tel}
	driver.events.recoverFailed(recovered.Failed)
	driver.events.unavailableGPUs(o.NodeName, gpus.Node.Unavailable)
	_ = pub.SetBase(ctx, resources) // no helper yet: only recorded
	driver.fabric = newFabricPoller(o, gpus, pub)
	fetcher := &claimFetcher{client: client, metrics: pm} // see claimfetch.go
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(o.DriverName),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.KubeClient(fetcher.Client()),
		kubeletplugin.GRPCInterceptor(fetcher.Intercept),
		kubeletplugin.RegistrarDirectoryPath(o.KubeletRegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(o.PluginDataDir()),
		kubeletplugin.RegistrarListener(endpoints.PrivateSocket),
		kubeletplugin.PluginListener(endpoints.PrivateSocket),
		// Claims on different GPUs prepare in parallel; the manager locks per device.
		kubeletplugin.Serialize(false),
		kubeletplugin.HealthService(hs != nil),
	}
	if o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(o.PodUID)))
	}
	opts = append(opts, o.metadataOptions()...)
	helper, err := kubeletplugin.Start(ctx, driver, opts...)
	if err != nil {
		return nil, fmt.Errorf("start kubelet plugin: %w", err)
	}
	reg8n.attach(helper)
	_ = pub.Attach(ctx, helper) // publishes nothing before the leader says so
	leader := newSliceLeader(o, pub, hs, func(ctx context.Context) int64 {
		generation, err := publishFirst(ctx, client, o.DriverName, o.NodeName, pub.Desired())
		if err != nil {
			logger.Error(err, "Could not publish the first ResourceSlice directly; the ResourceSlice controller will")
		}
		return generation
	})
	if err := leader.start(ctx); err != nil {
		helper.Stop()
		return nil, err
	}
	bgCtx, bgCancel := context.WithCancel(ctx)
	driver.startBackground(bgCtx)
	stopBackground := func() {
		bgCancel()
		if hs != nil {
			hs.wait()
		}
		driver.background.Wait()
	}
	// Start-up (discovery, nvcdi's scan of the driver root, recovery, the
	// slice) left garbage that the runtime returns to the kernel only at its
	// own slow pace; the plugin idles on every GPU node, so return it now
	// (docs/design/prepare-costs.md#memory).
	debug.FreeOSMemory()
	logger.Info("gpu-kubelet-plugin running", "node", o.NodeName, "driver", o.DriverName, "gpus", len(gpus.Node.GPUs),
		"cdiRoot", o.CDIRoot, "dataDir", o.PluginDataDir())
	return &Plugin{Helper: helper, Manager: manager, MetricsAddr: metricsAddr, gpus: gpus, leader: leader,
		stopBackground: stopBackground}, nil
}

func kubeClient(o *Options) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %q (set --kubeconfig or run in a pod): %w", o.Kubeconfig, err)
	}
	cfg.QPS = o.KubeAPIQPS
	cfg.Burst = o.KubeAPIBurst
	cfg.UserAgent = "gpu-kubelet-plugin"
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("create HTTP client for %s: %w", cfg.Host, err)
	}
	client, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	// Claim reads answer the kubelet's prepare calls one to one and skip the
	// client-side rate limit (see claimfetch.go).
	claimCfg := rest.CopyConfig(cfg)
	claimCfg.QPS, claimCfg.RateLimiter = -1, nil
	claims, err := resourcev1.NewForConfigAndClient(claimCfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client for claims: %w", err)
	}
	return unthrottledClaims(client, claims), nil
}
