package computedomain

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

const (
	oldImage = "registry.example/gpudra:old"
	dsName   = "computedomain-uid-1"
)

// desiredDaemonSet is the DaemonSet a controller with daemonImage builds
// for the test's domain (team-a/train, uid-1, gpudra's group).
func desiredDaemonSet(t *testing.T, daemonImage string) *appsv1.DaemonSet {
	t.Helper()
	names := compat.Default()
	c := &Controller{cfg: Config{Names: names, Namespace: driverNS, DaemonImage: daemonImage}, cd: names.ComputeDomain()}
	cd, err := decode(domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", 0, "chan", ""))
	require.NoError(t, err)
	ds, err := c.daemonSet(key{v1alpha1.GroupName, "team-a", "train"}, cd)
	require.NoError(t, err)
	return ds
}

// serverDefaulted is ds as the API server stores it: metadata it sets and
// the defaults of the DaemonSet and pod APIs filled in.
func serverDefaulted(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	ds = ds.DeepCopy()
	ds.UID, ds.Generation, ds.CreationTimestamp = "ds-uid", 1, metav1.Now()
	ds.Annotations["deprecated.daemonset.template.generation"] = "1"
	ds.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	if ds.Spec.UpdateStrategy.Type == "" {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0))}}
	}
	pod := &ds.Spec.Template.Spec
	pod.RestartPolicy, pod.DNSPolicy, pod.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, corev1.DefaultSchedulerName
	pod.TerminationGracePeriodSeconds = ptr.To[int64](30)
	pod.SecurityContext = &corev1.PodSecurityContext{}
	for i := range pod.Containers {
		ctr := &pod.Containers[i]
		ctr.TerminationMessagePath, ctr.TerminationMessagePolicy = "/dev/termination-log", corev1.TerminationMessageReadFile
		ctr.ImagePullPolicy = corev1.PullIfNotPresent
		for _, p := range []*corev1.Probe{ctr.StartupProbe, ctr.ReadinessProbe} {
			p.SuccessThreshold = 1
		}
		for j := range ctr.Env {
			if ref := ctr.Env[j].ValueFrom; ref != nil && ref.FieldRef != nil {
				ref.FieldRef.APIVersion = "v1"
			}
		}
	}
	return ds
}

// daemonSetWrites returns the creates and updates of DaemonSets the fake
// clientset has seen.
func daemonSetWrites(e *env) (creates, updates int) {
	for _, a := range e.kube.Actions() {
		if a.GetResource().Resource != "daemonsets" {
			continue
		}
		switch a.GetVerb() {
		case "create":
			creates++
		case "update":
			updates++
		}
	}
	return creates, updates
}

// TestDaemonSetUpdated: the controller brings a domain's existing DaemonSet
// to what it would create now (after an upgrade: a new image, changed
// command or tolerations) and writes nothing when the fields it sets are
// unchanged, whatever the API server filled in.
func TestDaemonSetUpdated(t *testing.T) {
	cases := []struct {
		name       string
		existing   func(t *testing.T) *appsv1.DaemonSet
		conflict   bool // the first update fails with 409
		wantUpdate bool // the controller updates it
	}{
		{name: "made by the previous version with the old image", wantUpdate: true, existing: func(t *testing.T) *appsv1.DaemonSet {
			ds := desiredDaemonSet(t, oldImage)
			delete(ds.Annotations, SpecHashAnnotation)
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{}
			return serverDefaulted(ds)
		}},
		{name: "old image, an operator's label and annotation, first update conflicts", wantUpdate: true, conflict: true,
			existing: func(t *testing.T) *appsv1.DaemonSet {
				ds := serverDefaulted(desiredDaemonSet(t, oldImage))
				ds.Labels["team"] = "infra"
				ds.Annotations["note"] = "kept"
				return ds
			}},
		{name: "changed command and tolerations under a stale hash", wantUpdate: true, existing: func(t *testing.T) *appsv1.DaemonSet {
			ds := desiredDaemonSet(t, image)
			ds.Spec.Template.Spec.Containers[0].Command = []string{"old-entry-point"}
			ds.Spec.Template.Spec.Tolerations = nil
			ds.Annotations[SpecHashAnnotation] = "0123456789abcdef"
			return serverDefaulted(ds)
		}},
		{name: "equal to the desired one", existing: func(t *testing.T) *appsv1.DaemonSet {
			return desiredDaemonSet(t, image)
		}},
		{name: "differs only by the API server's defaults", existing: func(t *testing.T) *appsv1.DaemonSet {
			return serverDefaulted(desiredDaemonSet(t, image))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			existing := tc.existing(t)
			e := newEnv(t, compat.Default(), []schema.GroupVersionResource{nativeGVR}, []runtime.Object{existing},
				domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", 0, "chan", ""))
			if tc.conflict {
				conflictOnce(&e.kube.Fake, "update", "daemonsets", "", errConflict)
			}
			e.run(t)
			ctx := context.Background()
			want := desiredDaemonSet(t, image)
			// Settled: the finalizer patch brought the domain to a second
			// sync; an update, when one is due, is stored.
			require.Eventually(t, func() bool {
				ds, err := e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, dsName, metav1.GetOptions{})
				return err == nil && e.counter(t, MetricSyncs, map[string]string{"queue": "objects", "result": "success"}) >= 2 &&
					(!tc.wantUpdate || ds.Annotations[SpecHashAnnotation] == want.Annotations[SpecHashAnnotation])
			}, waitFor, tick, "the domain is synced")
			e.resync(t, nativeGVR, "team-a", "train")
			ds, err := e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, dsName, metav1.GetOptions{})
			require.NoError(t, err)
			creates, updates := daemonSetWrites(e)
			assert.Zero(t, creates, "an existing DaemonSet is never created again")
			if !tc.wantUpdate {
				assert.Zero(t, updates, "no write when the DaemonSet already is what the controller would create")
				assert.Equal(t, existing.Spec, ds.Spec)
				assert.Zero(t, e.counter(t, MetricWrites, map[string]string{"object": "update"}))
				return
			}
			wantUpdates := 1
			if tc.conflict {
				wantUpdates = 2
				assert.Equal(t, 1.0, e.counter(t, MetricWrites, map[string]string{"object": "update", "result": "conflict"}))
			}
			assert.Equal(t, wantUpdates, updates, "one update (and one retry after a conflict), none on the resync")
			assert.Equal(t, 1.0, e.counter(t, MetricWrites, map[string]string{"object": "update", "result": "success"}))
			assert.Equal(t, want.Spec, ds.Spec, "the spec is the controller's current one")
			assert.Equal(t, image, ds.Spec.Template.Spec.Containers[0].Image)
			assert.Equal(t, appsv1.OnDeleteDaemonSetStrategyType, ds.Spec.UpdateStrategy.Type)
			assert.Equal(t, want.Annotations[SpecHashAnnotation], ds.Annotations[SpecHashAnnotation])
			for k, v := range existing.Labels {
				if _, ours := want.Labels[k]; !ours {
					assert.Equal(t, v, ds.Labels[k], "a label the controller does not set is kept")
				}
			}
			for k, v := range existing.Annotations {
				if _, ours := want.Annotations[k]; !ours {
					assert.Equal(t, v, ds.Annotations[k], "an annotation the controller does not set is kept")
				}
			}
		})
	}
}

// TestSpecHashIgnoresServerDefaults: the hash covers the fields the
// controller sets and changes with each of them.
func TestSpecHashIgnoresServerDefaults(t *testing.T) {
	want := desiredDaemonSet(t, image)
	h := want.Annotations[SpecHashAnnotation]
	require.Len(t, h, 32)
	again, err := specHash(want)
	require.NoError(t, err)
	assert.Equal(t, h, again, "the hash does not cover itself")
	for name, change := range map[string]func(*appsv1.DaemonSet){
		"image":       func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = oldImage },
		"command":     func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Command = []string{"x"} },
		"env":         func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Env = nil },
		"resources":   func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Resources.Claims = nil },
		"tolerations": func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Tolerations = nil },
		"nodeSelector": func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.NodeSelector = map[string]string{"x": "y"}
		},
		"affinity":       func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Affinity = &corev1.Affinity{} },
		"label":          func(ds *appsv1.DaemonSet) { ds.Labels["x"] = "y" },
		"annotation":     func(ds *appsv1.DaemonSet) { ds.Annotations[RefAnnotation] = "x" },
		"updateStrategy": func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{} },
	} {
		ds := want.DeepCopy()
		change(ds)
		got, err := specHash(ds)
		require.NoError(t, err)
		assert.NotEqual(t, h, got, "a changed %s changes the hash", name)
	}
}

// TestDeletedDaemonSetRecreated: a DaemonSet deleted by hand is created
// again, with the controller's current spec.
func TestDeletedDaemonSetRecreated(t *testing.T) {
	e := newEnv(t, compat.Default(), []schema.GroupVersionResource{nativeGVR}, nil,
		domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", 0, "chan", ""))
	e.run(t)
	ctx := context.Background()
	dss := e.kube.AppsV1().DaemonSets(driverNS)
	require.Eventually(t, func() bool {
		_, err := dss.Get(ctx, dsName, metav1.GetOptions{})
		return err == nil
	}, waitFor, tick)
	require.NoError(t, dss.Delete(ctx, dsName, metav1.DeleteOptions{}))
	var ds *appsv1.DaemonSet
	require.Eventually(t, func() bool {
		var err error
		ds, err = dss.Get(ctx, dsName, metav1.GetOptions{})
		return err == nil
	}, waitFor, tick, "the deleted DaemonSet is created again")
	assert.Equal(t, desiredDaemonSet(t, image).Spec, ds.Spec)
	// Creates are not counted: a sync that runs before the informer has
	// the first DaemonSet tries to create it again (AlreadyExists).
	_, updates := daemonSetWrites(e)
	assert.Zero(t, updates, "a recreated DaemonSet needs no update")
}

// resync changes a label of the domain, which syncs it once more, and
// waits for that sync.
func (e *env) resync(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	syncs := func() float64 {
		return e.counter(t, MetricSyncs, map[string]string{"queue": "objects", "result": "success"})
	}
	before := syncs()
	u := e.get(t, gvr, ns, name)
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["test.gpudra.io/resync"] += "x"
	u.SetLabels(labels)
	_, err := e.dyn.Resource(gvr).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return syncs() > before }, waitFor, tick, "the domain is synced again")
}
