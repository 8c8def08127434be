package computedomain

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// uidIndex indexes ComputeDomains by UID: claims name domains by UID only.
const uidIndex = "uid"

// Domains is a DomainGetter over informers of the ComputeDomain group
// versions the API server serves (the controller's computedomain.Served
// finds them), indexed by UID.
type Domains struct {
	informers map[schema.GroupVersionResource]cache.SharedIndexInformer
}

// NewDomains adds the informers of gvrs, with a UID index, to factory;
// the caller starts the factory and waits for HasSynced.
func NewDomains(factory dynamicinformer.DynamicSharedInformerFactory, gvrs []schema.GroupVersionResource) (*Domains, error) {
	d := &Domains{informers: map[schema.GroupVersionResource]cache.SharedIndexInformer{}}
	for _, gvr := range gvrs {
		inf := factory.ForResource(gvr).Informer()
		if err := inf.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return nil, nil
			}
			return []string{string(u.GetUID())}, nil
		}}); err != nil {
			return nil, fmt.Errorf("index ComputeDomains (%s) by UID: %w", gvr, err)
		}
		d.informers[gvr] = inf
	}
	return d, nil
}

// HasSynced tells whether every informer has listed its domains once.
func (d *Domains) HasSynced() bool {
	for _, inf := range d.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// GetDomain implements DomainGetter.
func (d *Domains) GetDomain(_ context.Context, uid string) (*v1alpha1.ComputeDomain, error) {
	for gvr, inf := range d.informers {
		objs, err := inf.GetIndexer().ByIndex(uidIndex, uid)
		if err != nil {
			return nil, fmt.Errorf("look up ComputeDomain %s (%s): %w", uid, gvr, err)
		}
		for _, obj := range objs {
			return decodeDomain(obj)
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.ComputeDomainResource}, uid)
}

// SyncNodesOnChange makes every added or changed ComputeDomain rewrite its
// node list on n (Node.SyncNodes); errors are logged, and the next change
// or the informer's resync tries again.
func (d *Domains) SyncNodesOnChange(ctx context.Context, n *Node) error {
	logger := klog.FromContext(ctx)
	sync := func(obj any) {
		cd, err := decodeDomain(obj)
		if err != nil {
			logger.Error(err, "Cannot read a ComputeDomain to update its node list")
			return
		}
		if _, err := n.SyncNodes(ctx, cd); err != nil {
			logger.Error(err, "Cannot update the node list of a ComputeDomain", "domain", klog.KObj(cd))
		}
	}
	for gvr, inf := range d.informers {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    sync,
			UpdateFunc: func(_, obj any) { sync(obj) },
		}); err != nil {
			return fmt.Errorf("watch ComputeDomains (%s): %w", gvr, err)
		}
	}
	return nil
}

// decodeDomain reads a ComputeDomain of either group from an informer's
// object (the groups share field names; NVIDIA's integers fit after the
// CRDs' bounds).
func decodeDomain(obj any) (*v1alpha1.ComputeDomain, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("ComputeDomain informer holds a %T", obj)
	}
	cd := &v1alpha1.ComputeDomain{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cd); err != nil {
		return nil, fmt.Errorf("read ComputeDomain %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return cd, nil
}
