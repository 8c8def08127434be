package computedomain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Bookkeeping names of the controller, the same in every mode.
const (
	// Finalizer keeps a ComputeDomain until its DaemonSet and templates are
	// deleted.
	Finalizer = "gpudra.io/computedomain-cleanup"
	// RefAnnotation, on every object the controller creates for a domain,
	// holds the domain's key (group/namespace/name), so that an event on the
	// object leads back to the domain even after the domain is gone.
	RefAnnotation = "gpudra.io/computedomain"
)

// Config configures the controller.
type Config struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Names are the driver's names; ComputeDomain() gives the channel
	// driver, classes and node label. The zero value is gpudra's native names.
	Names compat.Names
	// Namespace is the driver's namespace: the IMEX DaemonSets and the
	// daemons' claim templates live there.
	Namespace string
	// DaemonImage is the image of the IMEX daemon pods; empty: no
	// DaemonSets are created (Run logs it).
	DaemonImage string
	// Recorder gets Warning events on domains whose template name is taken;
	// nil records none.
	Recorder events.EventRecorder
	// Metrics records syncs and writes; nil records nothing.
	Metrics *Metrics
	// Workers per queue; 2 when zero.
	Workers int
	// StatusDelay is how long a status sync waits after the first event
	// that calls for it, so that the events of a burst (a DaemonSet's pods
	// starting on many nodes) end in one write. 1s when zero.
	StatusDelay time.Duration
	// DiscoveryInterval is how often Run checks which ComputeDomain CRDs
	// are served. 30s when zero.
	DiscoveryInterval time.Duration
	// DaemonPodNudgeAfter is how long after its scheduling an IMEX daemon
	// pod whose sandbox the kubelet has not created gets its first nudge
	// (NudgeAnnotation), the next ones after twice as long each time; zero:
	// no nudges.
	DaemonPodNudgeAfter time.Duration
	// Clock of the nudges; the real clock when nil.
	Clock clock.WithTicker
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.StatusDelay <= 0 {
		c.StatusDelay = time.Second
	}
	if c.DiscoveryInterval <= 0 {
		c.DiscoveryInterval = 30 * time.Second
	}
	if c.Names.Driver == "" {
		c.Names = compat.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

// key identifies a ComputeDomain across the groups the controller serves.
type key struct{ Group, Namespace, Name string }

func (k key) String() string { return k.Group + "/" + k.Namespace + "/" + k.Name }

func parseKey(s string) (key, bool) {
	parts := strings.SplitN(s, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return key{}, false
	}
	return key{parts[0], parts[1], parts[2]}, true
}

// Index names.
const (
	refIndex  = "computedomain-ref"
	nodeIndex = "node"
)

// Controller reconciles the ComputeDomains of the group versions it was
// created for. Use Run, which creates one for the CRDs that are served.
type Controller struct {
	cfg     Config
	cd      compat.ComputeDomainNames
	gvrs    map[string]schema.GroupVersionResource // by group
	domains map[string]cache.SharedIndexInformer   // by group

	templates, daemonSets, pods, slices cache.SharedIndexInformer
	factories                           []interface{ Start(<-chan struct{}) }
	synced                              []cache.InformerSynced

	queue, statusQueue workqueue.TypedRateLimitingInterface[key]
	nudges             *nudges // nil: off

	conflictsMu sync.Mutex
	conflicts   map[string]string // object -> resourceVersion already reported

	updatesMu sync.Mutex
	updates   map[string]update // DaemonSet namespace/name -> the last update written
}

// update is a DaemonSet update the controller wrote: from which
// resourceVersion, to which SpecHashAnnotation.
type update struct{ from, hash string }

// New creates a controller for the given ComputeDomain resources and
// registers its informers. Call Run (of the Controller) once.
func New(cfg Config, served []schema.GroupVersionResource) (*Controller, error) {
	cfg.defaults()
	if len(served) == 0 {
		return nil, errors.New("no ComputeDomain resource to watch")
	}
	cdn := cfg.Names.ComputeDomain()
	c := &Controller{
		cfg: cfg, cd: cdn, gvrs: map[string]schema.GroupVersionResource{}, domains: map[string]cache.SharedIndexInformer{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "gpudra-computedomain"}),
		statusQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "gpudra-computedomain-status"}),
		conflicts: map[string]string{}, updates: map[string]update{}, nudges: newNudges(cfg),
	}
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(cfg.Dynamic, 0)
	for _, gvr := range served {
		inf := dynFactory.ForResource(gvr).Informer()
		c.gvrs[gvr.Group], c.domains[gvr.Group] = gvr, inf
		group := gvr.Group
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.onDomain(group, obj) },
			UpdateFunc: func(_, obj any) { c.onDomain(group, obj) },
			DeleteFunc: func(obj any) { c.onDomain(group, obj) },
		}); err != nil {
			return nil, fmt.Errorf("watch %s: %w", gvr, err)
		}
		c.synced = append(c.synced, inf.HasSynced)
	}

	owned := informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cdn.Label })
	all := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, owned)
	ns := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, owned, informers.WithNamespace(cfg.Namespace))
	sl := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.driver", cdn.Driver).String()
	}))
	c.factories = []interface{ Start(<-chan struct{}) }{dynFactory, all, ns, sl}
	c.templates = all.Resource().V1().ResourceClaimTemplates().Informer()
	c.daemonSets = ns.Apps().V1().DaemonSets().Informer()
	c.pods = ns.Core().V1().Pods().Informer()
	c.slices = sl.Resource().V1().ResourceSlices().Informer()
	for _, inf := range []cache.SharedIndexInformer{c.templates, c.daemonSets, c.pods} {
		if err := inf.AddIndexers(cache.Indexers{refIndex: indexRef}); err != nil {
			return nil, fmt.Errorf("index by ComputeDomain: %w", err)
		}
	}
	for _, inf := range []cache.SharedIndexInformer{c.pods, c.slices} {
		if err := inf.AddIndexers(cache.Indexers{nodeIndex: indexNode}); err != nil {
			return nil, fmt.Errorf("index by node: %w", err)
		}
	}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		fn  func(any)
	}{{c.templates, c.onChild}, {c.daemonSets, c.onChild}, {c.pods, c.onPodEvent}, {c.slices, c.onSlice}} {
		fn := h.fn
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: fn, UpdateFunc: func(_, obj any) { fn(obj) }, DeleteFunc: fn,
		}); err != nil {
			return nil, fmt.Errorf("watch the ComputeDomains' objects: %w", err)
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}
	return c, nil
}

func unwrap(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}

func indexRef(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil || m.GetAnnotations()[RefAnnotation] == "" {
		return nil, nil //nolint:nilerr // objects without the annotation are not indexed
	}
	return []string{m.GetAnnotations()[RefAnnotation]}, nil
}

// indexNode indexes daemon pods and ResourceSlices by their node.
func indexNode(obj any) ([]string, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		if o.Spec.NodeName != "" {
			return []string{o.Spec.NodeName}, nil
		}
	case *resourceapi.ResourceSlice:
		if o.Spec.NodeName != nil {
			return []string{*o.Spec.NodeName}, nil
		}
	}
	return nil, nil
}

func metaOf(obj any) (metav1.Object, error) {
	m, ok := unwrap(obj).(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an object", obj)
	}
	return m, nil
}

func (c *Controller) onDomain(group string, obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	k := key{group, m.GetNamespace(), m.GetName()}
	c.queue.Add(k)
	c.statusQueue.AddAfter(k, c.cfg.StatusDelay)
}

// onChild brings the domain of a created object back to its sync: a
// deleted DaemonSet is recreated, an orphan is deleted.
func (c *Controller) onChild(obj any) {
	names, _ := indexRef(obj)
	for _, n := range names {
		if k, ok := parseKey(n); ok {
			c.queue.Add(k)
		}
	}
}

// onPod schedules a status sync of the pod's domain: a daemon pod started,
// became ready or went away.
func (c *Controller) onPod(obj any) {
	names, _ := indexRef(obj)
	for _, n := range names {
		if k, ok := parseKey(n); ok {
			c.statusQueue.AddAfter(k, c.cfg.StatusDelay)
		}
	}
}

// onSlice schedules status syncs of the domains with a daemon on the
// slice's node: its clique ID may have changed.
func (c *Controller) onSlice(obj any) {
	slice, ok := unwrap(obj).(*resourceapi.ResourceSlice)
	if !ok || slice.Spec.NodeName == nil {
		return
	}
	pods, _ := c.pods.GetIndexer().ByIndex(nodeIndex, *slice.Spec.NodeName)
	for _, p := range pods {
		c.onPod(p)
	}
}

// Run starts the informers, waits for them and syncs domains until ctx is
// done.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	defer c.statusQueue.ShutDown()
	if c.nudges != nil {
		defer c.nudges.queue.ShutDown()
	}
	logger := klog.FromContext(ctx)
	groups := make([]string, 0, len(c.gvrs))
	for _, gvr := range c.gvrs {
		groups = append(groups, gvr.GroupVersion().String())
	}
	logger.Info("Starting the ComputeDomain controller", "versions", groups, "daemonNamespace", c.cfg.Namespace,
		"channelClass", c.cd.ChannelClass, "daemonClass", c.cd.DaemonClass, "daemonImage", c.cfg.DaemonImage,
		"daemonPodNudgeAfter", c.cfg.DaemonPodNudgeAfter)
	if c.cfg.DaemonImage == "" {
		logger.Info("No IMEX daemon image (--compute-domain-daemon-image): ComputeDomains get their templates and status but no DaemonSet")
	}
	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("ComputeDomain controller: informers did not sync: %w", context.Cause(ctx))
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) { c.drain(ctx, c.queue, "objects", c.syncDomain) }, time.Second)
		})
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) { c.drain(ctx, c.statusQueue, "status", c.syncStatus) }, time.Second)
		})
	}
	if c.nudges != nil {
		wg.Go(func() { wait.UntilWithContext(ctx, c.drainNudges, time.Second) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	c.statusQueue.ShutDown()
	if c.nudges != nil {
		c.nudges.queue.ShutDown()
	}
	wg.Wait()
	logger.Info("Stopped the ComputeDomain controller")
	return nil
}

// drain processes q's keys with sync until q shuts down. A failed key is
// retried with the queue's backoff (5ms doubling to 1000s), never at once.
func (c *Controller) drain(ctx context.Context, q workqueue.TypedRateLimitingInterface[key], name string,
	sync func(context.Context, key) error) {
	for {
		k, quit := q.Get()
		if quit {
			return
		}
		logger := klog.FromContext(ctx).WithValues("computeDomain", k.String())
		start := time.Now()
		err := sync(klog.NewContext(ctx, logger), k)
		c.cfg.Metrics.observeSync(name, start, err)
		if err != nil {
			logger.Error(err, "ComputeDomain sync failed; retrying", "queue", name, "attempts", q.NumRequeues(k)+1)
			q.AddRateLimited(k)
		} else {
			q.Forget(k)
		}
		q.Done(k)
	}
}

// domain returns the domain of k from the informer cache, decoded into
// gpudra's type (NVIDIA's v1beta1 has the same fields); nil when absent.
func (c *Controller) domain(k key) (*v1alpha1.ComputeDomain, error) {
	inf := c.domains[k.Group]
	if inf == nil {
		return nil, nil
	}
	obj, exists, err := inf.GetIndexer().GetByKey(k.Namespace + "/" + k.Name)
	if err != nil || !exists {
		return nil, err
	}
	return decode(obj)
}

// daemonName is the name of a domain's DaemonSet and of its daemons' claim
// template in the driver's namespace: unique per domain, whatever its name
// and namespace, and short enough for any object name.
func daemonName(uid string) string { return "computedomain-" + uid }
