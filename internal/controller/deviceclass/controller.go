package deviceclass

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Options configure the controller.
type Options struct {
	// PerModelClasses enables one DeviceClass per GPU productName.
	PerModelClasses bool
	// PerProfileMIGClasses enables one DeviceClass per MIG profile.
	PerProfileMIGClasses bool
	// MIGExtendedResourcePrefix, when set, names each per-profile class's
	// extended resource: the prefix followed by the profile (nvidia.com/mig-
	// gives nvidia.com/mig-1g.10gb).
	MIGExtendedResourcePrefix string
	// ExtendedResourceName, when set, goes into spec.extendedResourceName of
	// the gpu.gpudra.io class (e.g. nvidia.com/gpu).
	ExtendedResourceName string
	// MaxDerivedClasses bounds the per-model and per-profile classes
	// together (cap.go); zero or less: no bound.
	MaxDerivedClasses int
	// Workers syncing classes in parallel; 2 when zero.
	Workers int
	// Metrics records reconciles; nil records nothing.
	Metrics *Metrics
	// Names are the driver's names (class names, the driver whose slices
	// name the models and profiles); the zero value is gpudra's native names.
	Names compat.Names
}

// Controller keeps the base DeviceClasses and, optionally, one class per GPU
// model found in the driver's ResourceSlices.
type Controller struct {
	client   kubernetes.Interface
	opts     Options
	recorder events.EventRecorder
	base     map[string]*resourceapi.DeviceClass

	classes     resourcelisters.DeviceClassLister
	sliceIndex  cache.Indexer
	claimIndex  cache.Indexer
	synced      []cache.InformerSynced
	hasSynced   atomic.Bool
	queue       workqueue.TypedRateLimitingInterface[string]
	ernDropped  atomic.Bool // the API server drops spec.extendedResourceName
	conflictsMu sync.Mutex
	conflicts   map[string]string // class name -> resourceVersion already reported
	capMu       sync.Mutex
	created     map[string]bool // derived classes created and not seen deleted
	capped      map[string]bool // derived classes not created: MaxDerivedClasses
}

// New registers the controller's informers with factory. Start the factory
// after New, then call Run.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder events.EventRecorder, opts Options) (*Controller, error) {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Names.Driver == "" {
		opts.Names = compat.Default()
	}
	c := &Controller{
		client: client, opts: opts, recorder: recorder,
		base: map[string]*resourceapi.DeviceClass{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gpudra-deviceclass"}),
		conflicts: map[string]string{}, created: map[string]bool{}, capped: map[string]bool{},
	}
	for _, b := range BaseClassesFor(opts.Names, opts.ExtendedResourceName) {
		c.base[b.Name] = b
	}

	classInformer := factory.Resource().V1().DeviceClasses()
	c.classes = classInformer.Lister()
	if _, err := classInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onClass,
		UpdateFunc: func(_, obj any) { c.onClass(obj) },
		DeleteFunc: func(obj any) { c.onClass(obj); c.onClassDeleted(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watch DeviceClasses: %w", err)
	}
	c.synced = append(c.synced, classInformer.Informer().HasSynced)
	if !opts.PerModelClasses && !opts.PerProfileMIGClasses {
		return c, nil
	}

	sliceInformer := factory.Resource().V1().ResourceSlices().Informer()
	claimInformer := factory.Resource().V1().ResourceClaims().Informer()
	if err := sliceInformer.AddIndexers(cache.Indexers{modelIndex: indexSliceModels(opts.Names)}); err != nil {
		return nil, fmt.Errorf("index ResourceSlices by GPU model: %w", err)
	}
	if err := claimInformer.AddIndexers(cache.Indexers{classIndex: indexClaimClasses}); err != nil {
		return nil, fmt.Errorf("index ResourceClaims by DeviceClass: %w", err)
	}
	c.sliceIndex, c.claimIndex = sliceInformer.GetIndexer(), claimInformer.GetIndexer()
	if _, err := sliceInformer.AddEventHandler(c.enqueueVia(indexSliceModels(opts.Names))); err != nil {
		return nil, fmt.Errorf("watch ResourceSlices: %w", err)
	}
	if _, err := claimInformer.AddEventHandler(c.enqueueVia(indexClaimClasses)); err != nil {
		return nil, fmt.Errorf("watch ResourceClaims: %w", err)
	}
	c.synced = append(c.synced, sliceInformer.HasSynced, claimInformer.HasSynced)
	return c, nil
}

// HasSynced reports whether the informers have synced and Run started work.
func (c *Controller) HasSynced() bool { return c.hasSynced.Load() }

func (c *Controller) onClass(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	class, ok := obj.(*resourceapi.DeviceClass)
	if ok && (c.base[class.Name] != nil || c.derived(class.Name)) {
		c.queue.Add(class.Name)
	}
}

// derived reports whether name has the form of a class the controller
// derives from the slices under its options: per-model or per-profile.
func (c *Controller) derived(name string) bool {
	return (c.opts.PerModelClasses && isModelClassName(c.opts.Names, name)) ||
		(c.opts.PerProfileMIGClasses && isProfileClassName(c.opts.Names, name))
}

// enqueueVia returns handlers that enqueue the class names index finds in the
// old and the new object.
func (c *Controller) enqueueVia(index cache.IndexFunc) cache.ResourceEventHandler {
	add := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		names, _ := index(obj)
		for _, n := range names {
			c.queue.Add(n)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(oldObj, newObj any) { add(oldObj); add(newObj) },
		DeleteFunc: add,
	}
}

// Run waits for the informers, makes sure the base classes exist, and syncs
// classes until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the DeviceClass controller", "perModelClasses", c.opts.PerModelClasses,
		"extendedResourceName", c.opts.ExtendedResourceName, "perProfileMIGClasses", c.opts.PerProfileMIGClasses,
		"migExtendedResourcePrefix", c.opts.MIGExtendedResourcePrefix, "maxDerivedClasses", c.opts.MaxDerivedClasses)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("DeviceClass controller: informers did not sync: %w", context.Cause(ctx))
	}
	for name := range c.base {
		c.queue.Add(name)
	}
	c.hasSynced.Store(true)
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.work, time.Second) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	logger.Info("Stopped the DeviceClass controller")
	return nil
}

func (c *Controller) work(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	logger := klog.FromContext(ctx).WithValues("deviceClass", name)
	start := time.Now()
	err := c.sync(klog.NewContext(ctx, logger), name)
	c.opts.Metrics.observe(start, err)
	if err != nil {
		logger.Error(err, "DeviceClass sync failed; retrying", "attempts", c.queue.NumRequeues(name)+1)
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

// sync brings one class to its desired state: a base class is kept as
// BaseClasses says, a model (or MIG profile) class exists while a slice has
// the model (a MIG device of the profile) and is deleted when no slice has it
// and no claim references it.
func (c *Controller) sync(ctx context.Context, name string) error {
	if desired := c.base[name]; desired != nil {
		return c.ensure(ctx, desired)
	}
	if !c.derived(name) {
		// With per-model (per-profile) classes off, existing ones are left
		// alone: the claims that might use them are not watched.
		return nil
	}
	n := c.opts.Names
	kind, list, derive := "model", sliceProducts, classNameForProduct
	if isProfileClassName(n, name) {
		kind, list, derive = "MIG profile", sliceMIGProfiles, classNameForMIGProfile
	}
	key, err := c.keyFor(ctx, name, kind, list, derive)
	if err != nil {
		return err
	}
	if key == "" {
		c.uncap(name)
		return c.deleteUnused(ctx, name)
	}
	var desired *resourceapi.DeviceClass
	if isProfileClassName(n, name) {
		desired, err = migProfileClassFor(n, key, c.opts.MIGExtendedResourcePrefix)
	} else {
		desired, err = modelClassFor(n, key)
	}
	if err != nil {
		return err
	}
	if _, err := c.classes.Get(name); !apierrors.IsNotFound(err) {
		return c.ensure(ctx, desired)
	}
	if !c.admitDerived(ctx, name) {
		return nil
	}
	if err := c.ensure(ctx, desired); err != nil {
		c.forgetCreated(name)
		return err
	}
	return nil
}

// keyFor returns the productName (MIG profile) whose class is name, if any
// slice of the driver has a GPU of that model (a MIG device of that profile).
// Should two keys map to the same name, the first in sort order gets the
// class.
func (c *Controller) keyFor(ctx context.Context, name, kind string, list func(compat.Names, *resourceapi.ResourceSlice) []string,
	derive func(compat.Names, string) (string, error)) (string, error) {
	objs, err := c.sliceIndex.ByIndex(modelIndex, name)
	if err != nil {
		return "", fmt.Errorf("look up ResourceSlices with %s %s: %w", kind, name, err)
	}
	var products []string
	for _, obj := range objs {
		for _, p := range list(c.opts.Names, obj.(*resourceapi.ResourceSlice)) {
			if n, err := derive(c.opts.Names, p); err == nil && n == name && !slices.Contains(products, p) {
				products = append(products, p)
			}
		}
	}
	if len(products) == 0 {
		return "", nil
	}
	slices.Sort(products)
	if len(products) > 1 {
		klog.FromContext(ctx).Info("Several GPU models or MIG profiles map to the same DeviceClass name; only the first gets a class",
			"kind", kind, "names", products, "chosen", products[0])
	}
	return products[0], nil
}

// ensure creates desired or repairs the existing class of that name. A class
// the controller does not manage is left alone and reported once per version.
func (c *Controller) ensure(ctx context.Context, desired *resourceapi.DeviceClass) error {
	logger := klog.FromContext(ctx)
	existing, err := c.classes.Get(desired.Name)
	if apierrors.IsNotFound(err) {
		_, err := c.client.ResourceV1().DeviceClasses().Create(ctx, desired, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // the informer brings it and triggers another sync
		}
		if err != nil {
			return fmt.Errorf("create DeviceClass %s: %w", desired.Name, err)
		}
		logger.Info("Created DeviceClass", "selector", desired.Spec.Selectors[0].CEL.Expression)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get DeviceClass %s from the informer cache: %w", desired.Name, err)
	}
	if !isManaged(existing) {
		c.reportConflict(ctx, existing)
		return nil
	}
	if !needsUpdate(existing, desired, c.ernDropped.Load()) {
		return nil
	}
	updated, err := c.client.ResourceV1().DeviceClasses().Update(ctx, merged(existing, desired), metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("repair DeviceClass %s: %w", desired.Name, err)
	}
	logger.Info("Repaired DeviceClass", "selector", desired.Spec.Selectors[0].CEL.Expression)
	if desired.Spec.ExtendedResourceName != nil && updated.Spec.ExtendedResourceName == nil {
		c.ernDropped.Store(true)
		logger.Info("The API server dropped spec.extendedResourceName; enable the DRAExtendedResource feature gate "+
			"or run without --extended-resource-name", "extendedResourceName", *desired.Spec.ExtendedResourceName)
	}
	return nil
}

func (c *Controller) reportConflict(ctx context.Context, existing *resourceapi.DeviceClass) {
	c.conflictsMu.Lock()
	rv, seen := c.conflicts[existing.Name]
	reported := seen && rv == existing.ResourceVersion
	c.conflicts[existing.Name] = existing.ResourceVersion
	c.conflictsMu.Unlock()
	if reported {
		return
	}
	msg := fmt.Sprintf("DeviceClass %s exists but is not managed by gpudra (no label %s=%s); leaving it alone. "+
		"Delete it, or add the label, to let the gpu-controller manage it", existing.Name, ManagedByLabel, ManagedByValue)
	klog.FromContext(ctx).Info(msg)
	if c.recorder != nil {
		c.recorder.Eventf(existing, nil, "Warning", "NameConflict", "Manage", msg)
	}
}

// deleteUnused deletes a managed per-model class unless a claim references it.
func (c *Controller) deleteUnused(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx)
	existing, err := c.classes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get DeviceClass %s from the informer cache: %w", name, err)
	}
	if existing.Labels[ModelLabel] != "true" {
		return nil
	}
	claims, err := c.claimIndex.ByIndex(classIndex, name)
	if err != nil {
		return fmt.Errorf("look up ResourceClaims using DeviceClass %s: %w", name, err)
	}
	if len(claims) > 0 {
		logger.V(2).Info("No GPU of this model (MIG device of this profile) is left, but claims still reference the class; keeping it",
			"claims", len(claims), "example", klog.KObj(claims[0].(*resourceapi.ResourceClaim)))
		return nil
	}
	// The claim informer may not have seen a claim created just before the
	// slice change that left the class unused (two watches, no order
	// between them): the API server has the last word before a delete.
	if claim, err := c.liveClaimUsing(ctx, name); err != nil {
		return err
	} else if claim != nil {
		logger.V(2).Info("No GPU of this model (MIG device of this profile) is left, but a claim the cache has not seen yet references the class; keeping it",
			"claim", klog.KObj(claim))
		return nil
	}
	err = c.client.ResourceV1().DeviceClasses().Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &existing.UID, ResourceVersion: &existing.ResourceVersion}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete unused DeviceClass %s: %w", name, err)
	}
	logger.Info("Deleted DeviceClass: no GPU of its model (MIG device of its profile) is left and no claim references it",
		"productName", existing.Annotations[ProductNameAnnotation], "migProfile", existing.Annotations[MIGProfileAnnotation])
	return nil
}
