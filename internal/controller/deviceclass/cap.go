package deviceclass

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The number of per-model and per-profile classes is bounded
// (Options.MaxDerivedClasses): their names come from what plugins publish,
// and one plugin publishing many productNames or profiles must not fill the
// cluster with DeviceClasses. Classes that exist are kept; a new one is
// created only while fewer exist (counting those created and not yet in the
// informer cache). A class left out is logged once, reported as a Warning
// event on a ResourceSlice that publishes its model and counted in the
// capped gauge; it is created once another derived class is deleted.

// admitDerived reports whether the derived class name, which does not exist,
// may be created under the cap, and records the decision.
func (c *Controller) admitDerived(ctx context.Context, name string) bool {
	if c.opts.MaxDerivedClasses <= 0 {
		return true
	}
	c.capMu.Lock()
	defer c.capMu.Unlock()
	if c.created[name] {
		return true
	}
	existing := map[string]bool{}
	classes, _ := c.classes.List(labels.Everything())
	for _, cl := range classes {
		if cl.Labels[ModelLabel] == "true" && c.derived(cl.Name) {
			existing[cl.Name] = true
		}
	}
	for n := range c.created {
		existing[n] = true
	}
	if len(existing) < c.opts.MaxDerivedClasses {
		delete(c.capped, name)
		c.created[name] = true
		c.opts.Metrics.setCapped(len(c.capped))
		return true
	}
	if !c.capped[name] {
		c.capped[name] = true
		c.opts.Metrics.setCapped(len(c.capped))
		c.reportCapped(ctx, name)
	}
	return false
}

func (c *Controller) reportCapped(ctx context.Context, name string) {
	klog.FromContext(ctx).Info("Not creating a per-model or per-profile DeviceClass: the limit is reached; "+
		"raise --max-derived-classes (chart value deviceClasses.maxDerived) if the cluster really has that many GPU models and MIG profiles",
		"limit", c.opts.MaxDerivedClasses)
	if c.recorder == nil {
		return
	}
	objs, err := c.sliceIndex.ByIndex(modelIndex, name)
	if err != nil || len(objs) == 0 {
		return
	}
	c.recorder.Eventf(objs[0].(*resourceapi.ResourceSlice), nil, "Warning", "DeviceClassLimit", "CreateDeviceClass",
		"DeviceClass %s not created: the gpu-controller keeps at most %d per-model and per-profile classes", name, c.opts.MaxDerivedClasses)
}

// uncap forgets a class left out whose model or profile is gone.
func (c *Controller) uncap(name string) {
	c.capMu.Lock()
	defer c.capMu.Unlock()
	if c.capped[name] {
		delete(c.capped, name)
		c.opts.Metrics.setCapped(len(c.capped))
	}
}

// forgetCreated drops name from the classes counted as created (its
// create failed, or the informer saw it deleted).
func (c *Controller) forgetCreated(name string) {
	c.capMu.Lock()
	defer c.capMu.Unlock()
	delete(c.created, name)
}

// onClassDeleted makes room: the classes left out are synced again.
func (c *Controller) onClassDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	class, ok := obj.(*resourceapi.DeviceClass)
	if !ok || !c.derived(class.Name) {
		return
	}
	c.capMu.Lock()
	defer c.capMu.Unlock()
	delete(c.created, class.Name)
	for n := range c.capped {
		c.queue.Add(n)
	}
}
