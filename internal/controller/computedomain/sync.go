package computedomain

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// syncDomain brings the objects of one domain to their desired state:
// children of a domain that is gone (or of an earlier domain of the same
// name) deleted; for a domain being deleted, its children deleted and then
// the finalizer removed; otherwise the finalizer, both templates and the
// DaemonSet present, the DaemonSet as the controller would create it now.
func (c *Controller) syncDomain(ctx context.Context, k key) error {
	cd, err := c.domain(k)
	if err != nil {
		return err
	}
	keep := ""
	if cd != nil && cd.DeletionTimestamp == nil {
		keep = string(cd.UID)
	}
	if err := c.deleteChildren(ctx, k, keep); err != nil {
		return err
	}
	if cd == nil {
		return nil
	}
	if cd.DeletionTimestamp != nil {
		return c.setFinalizer(ctx, k, cd, false)
	}
	if cd.Spec.Channel == nil {
		return nil // refused by the CRD's schema; nothing to create
	}
	if err := c.setFinalizer(ctx, k, cd, true); err != nil {
		return err
	}
	channel, err := c.channelTemplate(k, cd)
	if err != nil {
		return err
	}
	daemon, err := c.daemonTemplate(k, cd)
	if err != nil {
		return err
	}
	for _, t := range []*resourceapi.ResourceClaimTemplate{channel, daemon} {
		if err := c.ensureTemplate(ctx, k, cd, t); err != nil {
			return err
		}
	}
	return c.ensureDaemonSet(ctx, k, cd)
}

// setFinalizer adds (or removes) the controller's finalizer with a merge
// patch carrying the resourceVersion the list was read at: a concurrent
// change of the finalizers fails with a conflict (counted, retried after
// backoff, by then with the informer's newer copy) instead of being lost.
func (c *Controller) setFinalizer(ctx context.Context, k key, cd *v1alpha1.ComputeDomain, present bool) error {
	has := slices.Contains(cd.Finalizers, Finalizer)
	if has == present {
		return nil
	}
	finalizers := slices.DeleteFunc(slices.Clone(cd.Finalizers), func(f string) bool { return f == Finalizer })
	if present {
		finalizers = append(finalizers, Finalizer)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": cd.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("encode the finalizer patch: %w", err)
	}
	_, err = c.cfg.Dynamic.Resource(c.gvrs[k.Group]).Namespace(k.Namespace).Patch(ctx, k.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) && !present {
		err = nil
	}
	if err := c.cfg.Metrics.observeWrite("finalizer", err); err != nil {
		return fmt.Errorf("%s the finalizer %s: %w", map[bool]string{true: "add", false: "remove"}[present], Finalizer, err)
	}
	if !present {
		klog.FromContext(ctx).Info("Cleaned up the ComputeDomain's DaemonSet and templates; removed the finalizer")
	}
	return nil
}

// ensureTemplate creates t unless it exists. A template of that name that
// belongs to another domain, or to no domain, is left alone and reported.
func (c *Controller) ensureTemplate(ctx context.Context, k key, cd *v1alpha1.ComputeDomain, t *resourceapi.ResourceClaimTemplate) error {
	obj, exists, err := c.templates.GetIndexer().GetByKey(t.Namespace + "/" + t.Name)
	if err != nil {
		return fmt.Errorf("get ResourceClaimTemplate %s/%s from the informer cache: %w", t.Namespace, t.Name, err)
	}
	if exists {
		return c.checkOwned(ctx, cd, obj.(*resourceapi.ResourceClaimTemplate).ObjectMeta, "ResourceClaimTemplate")
	}
	_, err = c.cfg.Client.ResourceV1().ResourceClaimTemplates(t.Namespace).Create(ctx, t, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Not in the cache: a template the controller does not label, or
		// one created a moment ago (the informer brings it).
		c.reportTaken(ctx, cd, "ResourceClaimTemplate", t.Namespace, t.Name, "")
		return nil
	}
	if err := c.cfg.Metrics.observeWrite("template", err); err != nil {
		return fmt.Errorf("create ResourceClaimTemplate %s/%s: %w", t.Namespace, t.Name, err)
	}
	klog.FromContext(ctx).Info("Created ResourceClaimTemplate", "template", klog.KObj(t))
	return nil
}

// ensureDaemonSet creates the domain's DaemonSet unless it exists, and
// updates the domain's existing one whose SpecHashAnnotation differs from
// the one the controller would create now (updateDaemonSet). Without a
// daemon image (run outside the chart) none is created or updated.
func (c *Controller) ensureDaemonSet(ctx context.Context, k key, cd *v1alpha1.ComputeDomain) error {
	if c.cfg.DaemonImage == "" {
		return nil
	}
	ds, err := c.daemonSet(k, cd)
	if err != nil {
		return err
	}
	obj, exists, err := c.daemonSets.GetIndexer().GetByKey(ds.Namespace + "/" + ds.Name)
	if err != nil {
		return fmt.Errorf("get DaemonSet %s/%s from the informer cache: %w", ds.Namespace, ds.Name, err)
	}
	if exists {
		cur := obj.(*appsv1.DaemonSet)
		if cur.Labels[c.cd.Label] != string(cd.UID) || cur.DeletionTimestamp != nil {
			return c.checkOwned(ctx, cd, cur.ObjectMeta, "DaemonSet")
		}
		return c.updateDaemonSet(ctx, cur, ds)
	}
	_, err = c.cfg.Client.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // the informer brings it and syncs the domain again
	}
	if err := c.cfg.Metrics.observeWrite("daemonset", err); err != nil {
		return fmt.Errorf("create DaemonSet %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	klog.FromContext(ctx).Info("Created the IMEX daemons' DaemonSet", "daemonSet", klog.KObj(ds))
	return nil
}

// updateDaemonSet brings cur, the domain's DaemonSet from the informer
// cache, to want when their SpecHashAnnotation differ: the controller's
// labels and annotations are set (others, an operator's, are kept) and
// the spec replaced by want's, so the API server fills in its defaults
// again. The update carries cur's resourceVersion: a stale cache fails
// with a conflict, retried after backoff. DaemonSets made before the
// annotation existed have none and are updated once.
func (c *Controller) updateDaemonSet(ctx context.Context, cur, want *appsv1.DaemonSet) error {
	hash, id := want.Annotations[SpecHashAnnotation], cur.Namespace+"/"+cur.Name
	if cur.Annotations[SpecHashAnnotation] == hash || c.updatePending(id, cur.ResourceVersion, hash) {
		return nil
	}
	upd := cur.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	maps.Copy(upd.Labels, want.Labels)
	maps.Copy(upd.Annotations, want.Annotations)
	upd.Spec = want.Spec
	_, err := c.cfg.Client.AppsV1().DaemonSets(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err := c.cfg.Metrics.observeWrite("update", err); err != nil {
		return fmt.Errorf("update DaemonSet %s/%s: %w", upd.Namespace, upd.Name, err)
	}
	c.updatesMu.Lock()
	c.updates[id] = update{from: cur.ResourceVersion, hash: hash}
	c.updatesMu.Unlock()
	klog.FromContext(ctx).Info("Updated the IMEX daemons' DaemonSet to the controller's current spec; running daemons are replaced when their pods are deleted (OnDelete)",
		"daemonSet", klog.KObj(upd), "image", imageOf(want), "previousImage", imageOf(cur),
		"previousHash", cur.Annotations[SpecHashAnnotation], "hash", want.Annotations[SpecHashAnnotation])
	return nil
}

// updatePending tells whether the controller already updated the version
// rv of DaemonSet id to hash: the informer has not brought the update yet
// (a sync queued by another event meanwhile), and writing it again would
// only fail with a conflict.
func (c *Controller) updatePending(id, rv, hash string) bool {
	c.updatesMu.Lock()
	defer c.updatesMu.Unlock()
	u, ok := c.updates[id]
	return ok && u.from == rv && u.hash == hash
}

// imageOf is the image of ds's first container, "" when it has none.
func imageOf(ds *appsv1.DaemonSet) string {
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return ""
	}
	return ds.Spec.Template.Spec.Containers[0].Image
}

// checkOwned reports an existing object of the wanted name that is not the
// domain's. One of an earlier domain of the same name is being deleted by
// deleteChildren; its replacement is created on the sync its deletion
// triggers.
func (c *Controller) checkOwned(ctx context.Context, cd *v1alpha1.ComputeDomain, m metav1.ObjectMeta, kind string) error {
	uid, labelled := m.Labels[c.cd.Label]
	switch {
	case uid == string(cd.UID):
		return nil
	case labelled && m.Annotations[RefAnnotation] != "":
		klog.FromContext(ctx).V(2).Info("Waiting for the object of an earlier ComputeDomain to go", "kind", kind,
			"object", klog.KRef(m.Namespace, m.Name), "uid", uid)
		return nil
	default:
		c.reportTaken(ctx, cd, kind, m.Namespace, m.Name, m.ResourceVersion)
		return nil
	}
}

// reportTaken logs, and records as a Warning event on the domain, that an
// object it needs exists and is not its own, once per version of it.
func (c *Controller) reportTaken(ctx context.Context, cd *v1alpha1.ComputeDomain, kind, namespace, name, rv string) {
	id := kind + "/" + namespace + "/" + name + "/" + string(cd.UID)
	c.conflictsMu.Lock()
	seen, reported := c.conflicts[id]
	c.conflicts[id] = rv
	c.conflictsMu.Unlock()
	if reported && seen == rv {
		return
	}
	msg := fmt.Sprintf("%s %s/%s exists and was not created for this ComputeDomain; leaving it alone. "+
		"Delete it, or give the ComputeDomain another spec.channel.resourceClaimTemplate.name (delete and create the domain)",
		kind, namespace, name)
	klog.FromContext(ctx).Info(msg)
	if c.cfg.Recorder != nil {
		c.cfg.Recorder.Eventf(cd, nil, "Warning", "NameTaken", "CreateTemplate", msg)
	}
}

// deleteChildren deletes the objects created for the domain key k whose
// domain UID is not keep (all of them when keep is empty), each with a UID
// precondition, so that an object recreated meanwhile is not hit.
func (c *Controller) deleteChildren(ctx context.Context, k key, keep string) error {
	logger := klog.FromContext(ctx)
	for _, kind := range []string{"DaemonSet", "ResourceClaimTemplate"} {
		inf := c.daemonSets
		if kind == "ResourceClaimTemplate" {
			inf = c.templates
		}
		objs, err := inf.GetIndexer().ByIndex(refIndex, k.String())
		if err != nil {
			return fmt.Errorf("look up the %ss of the ComputeDomain: %w", kind, err)
		}
		for _, obj := range objs {
			m, err := metaOf(obj)
			if err != nil || (keep != "" && m.GetLabels()[c.cd.Label] == keep) || m.GetDeletionTimestamp() != nil {
				continue
			}
			opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrUID(m.GetUID())},
				PropagationPolicy: ptrPolicy(metav1.DeletePropagationBackground)}
			if kind == "DaemonSet" {
				c.updatesMu.Lock()
				delete(c.updates, m.GetNamespace()+"/"+m.GetName())
				c.updatesMu.Unlock()
				err = c.cfg.Client.AppsV1().DaemonSets(m.GetNamespace()).Delete(ctx, m.GetName(), opts)
			} else {
				err = c.cfg.Client.ResourceV1().ResourceClaimTemplates(m.GetNamespace()).Delete(ctx, m.GetName(), opts)
			}
			if apierrors.IsNotFound(err) {
				continue
			}
			if err := c.cfg.Metrics.observeWrite("delete", err); err != nil {
				return fmt.Errorf("delete %s %s/%s: %w", kind, m.GetNamespace(), m.GetName(), err)
			}
			logger.Info("Deleted an object of the ComputeDomain", "kind", kind, "object", klog.KRef(m.GetNamespace(), m.GetName()),
				"domainUID", m.GetLabels()[c.cd.Label])
		}
	}
	return nil
}

func ptrUID(uid types.UID) *types.UID { return &uid }

func ptrPolicy(p metav1.DeletionPropagation) *metav1.DeletionPropagation { return &p }
