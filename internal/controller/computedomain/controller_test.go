package computedomain

import (
	"context"
	"encoding/json"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

func TestDomainObjects(t *testing.T) {
	native, nvidia := compat.Default(), compat.MustResolve(compat.Flags{Compatibility: "nvidia"})
	taken := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "chan", Namespace: "team-a"}}
	cases := []struct {
		name      string
		names     compat.Names
		gvr       schema.GroupVersionResource
		mode      string
		existing  []runtime.Object
		wantMode  string
		wantClass string
		wantTaken bool
	}{
		{name: "native, Single by default", names: native, gvr: nativeGVR, wantMode: "Single",
			wantClass: "compute-domain-default-channel.gpudra.io"},
		{name: "native, All", names: native, gvr: nativeGVR, mode: "All", wantMode: "All",
			wantClass: "compute-domain-default-channel.gpudra.io"},
		{name: "NVIDIA mode, NVIDIA's group", names: nvidia, gvr: nvidiaGVR, mode: "Single", wantMode: "Single",
			wantClass: "compute-domain-default-channel.nvidia.com"},
		{name: "NVIDIA mode, gpudra's group", names: nvidia, gvr: nativeGVR, mode: "All", wantMode: "All",
			wantClass: "compute-domain-default-channel.nvidia.com"},
		{name: "template name taken by another object", names: native, gvr: nativeGVR, existing: []runtime.Object{taken},
			wantTaken: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cdn := tc.names.ComputeDomain()
			e := newEnv(t, tc.names, []schema.GroupVersionResource{tc.gvr}, tc.existing,
				domainObj(tc.gvr.GroupVersion(), "team-a", "train", "uid-1", 2, "chan", tc.mode))
			e.run(t)
			ctx := context.Background()
			var ds *appsv1.DaemonSet
			require.Eventually(t, func() bool {
				var err error
				ds, err = e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, "computedomain-uid-1", metav1.GetOptions{})
				return err == nil
			}, waitFor, tick, "the IMEX DaemonSet is created")
			require.Eventually(t, func() bool {
				return len(e.get(t, tc.gvr, "team-a", "train").GetFinalizers()) == 1
			}, waitFor, tick, "the finalizer is added")
			assert.Equal(t, []string{Finalizer}, e.get(t, tc.gvr, "team-a", "train").GetFinalizers())

			assert.Equal(t, map[string]string{cdn.Label: "uid-1"}, ds.Spec.Template.Spec.NodeSelector)
			ctr := ds.Spec.Template.Spec.Containers[0]
			assert.Equal(t, image, ctr.Image)
			// Root with CAP_SYS_CHROOT only (nvidia-imex runs chrooted into
			// the driver root); readiness checked every second until first
			// ready, since the workload's prepares wait for it.
			assert.Equal(t, []corev1.Capability{DaemonCapability}, ctr.SecurityContext.Capabilities.Add)
			assert.Equal(t, []corev1.Capability{"ALL"}, ctr.SecurityContext.Capabilities.Drop)
			assert.Equal(t, int64(0), *ctr.SecurityContext.RunAsUser)
			assert.Equal(t, DaemonCheckCommand, ctr.StartupProbe.Exec.Command)
			assert.Equal(t, int32(1), ctr.StartupProbe.PeriodSeconds)
			assert.Equal(t, "computedomain-uid-1", *ds.Spec.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName)
			assert.Equal(t, tc.gvr.Group+"/team-a/train", ds.Annotations[RefAnnotation])
			daemon, err := e.kube.ResourceV1().ResourceClaimTemplates(driverNS).Get(ctx, "computedomain-uid-1", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, cdn.DaemonClass, daemon.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName)

			ch, err := e.kube.ResourceV1().ResourceClaimTemplates("team-a").Get(ctx, "chan", metav1.GetOptions{})
			require.NoError(t, err)
			if tc.wantTaken {
				assert.Empty(t, ch.Labels, "a template the controller did not create is left alone")
				assert.Empty(t, ch.Spec.Spec.Devices.Requests)
				return
			}
			assert.Equal(t, "uid-1", ch.Labels[cdn.Label])
			require.Len(t, ch.OwnerReferences, 1)
			assert.Equal(t, "uid-1", string(ch.OwnerReferences[0].UID))
			assert.Equal(t, tc.gvr.GroupVersion().String(), ch.OwnerReferences[0].APIVersion)
			req := ch.Spec.Spec.Devices.Requests[0].Exactly
			assert.Equal(t, tc.wantClass, req.DeviceClassName)
			assert.Equal(t, resourceapi.DeviceAllocationModeExactCount, req.AllocationMode)
			assert.Equal(t, int64(1), req.Count)
			opaque := ch.Spec.Spec.Devices.Config[0].Opaque
			assert.Equal(t, cdn.Driver, opaque.Driver)
			var params map[string]string
			require.NoError(t, json.Unmarshal(opaque.Parameters.Raw, &params))
			assert.Equal(t, map[string]string{"apiVersion": cdn.ConfigAPIVersion, "kind": cdn.ChannelConfigKind,
				"domainID": "uid-1", "allocationMode": tc.wantMode}, params)
		})
	}
}

func TestDeleteCleansUp(t *testing.T) {
	for _, how := range []string{"finalizer", "gone without finalizer"} {
		t.Run(how, func(t *testing.T) {
			names := compat.Default()
			e := newEnv(t, names, []schema.GroupVersionResource{nativeGVR}, nil,
				domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", 0, "chan", ""))
			e.run(t)
			ctx := context.Background()
			cds := e.dyn.Resource(nativeGVR).Namespace("team-a")
			require.Eventually(t, func() bool {
				_, err := e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, "computedomain-uid-1", metav1.GetOptions{})
				return err == nil && len(e.get(t, nativeGVR, "team-a", "train").GetFinalizers()) == 1
			}, waitFor, tick)
			if how == "finalizer" {
				u := e.get(t, nativeGVR, "team-a", "train")
				now := metav1.Now()
				u.SetDeletionTimestamp(&now)
				_, err := cds.Update(ctx, u, metav1.UpdateOptions{})
				require.NoError(t, err)
				require.Eventually(t, func() bool { return len(e.get(t, nativeGVR, "team-a", "train").GetFinalizers()) == 0 },
					waitFor, tick, "the finalizer is removed")
			} else {
				require.NoError(t, cds.Delete(ctx, "train", metav1.DeleteOptions{}))
			}
			require.Eventually(t, func() bool {
				_, err1 := e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, "computedomain-uid-1", metav1.GetOptions{})
				_, err2 := e.kube.ResourceV1().ResourceClaimTemplates(driverNS).Get(ctx, "computedomain-uid-1", metav1.GetOptions{})
				_, err3 := e.kube.ResourceV1().ResourceClaimTemplates("team-a").Get(ctx, "chan", metav1.GetOptions{})
				return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2) && apierrors.IsNotFound(err3)
			}, waitFor, tick, "the DaemonSet and both templates are deleted")
		})
	}
}

// TestRecreatedDomain: a domain deleted without the controller's cleanup
// and created again under the same name gets new objects; the old ones,
// whose daemons know the old UID, are deleted, the channel template (same
// name) replaced.
func TestRecreatedDomain(t *testing.T) {
	e := newEnv(t, compat.Default(), []schema.GroupVersionResource{nativeGVR}, nil,
		domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", 0, "chan", ""))
	e.run(t)
	ctx := context.Background()
	label := compat.Default().ComputeDomain().Label
	require.Eventually(t, func() bool {
		_, err := e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, "computedomain-uid-1", metav1.GetOptions{})
		return err == nil
	}, waitFor, tick)
	cds := e.dyn.Resource(nativeGVR).Namespace("team-a")
	require.NoError(t, cds.Delete(ctx, "train", metav1.DeleteOptions{}))
	_, err := cds.Create(ctx, domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-2", 0, "chan", "All"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, errOld := e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, "computedomain-uid-1", metav1.GetOptions{})
		_, errNew := e.kube.AppsV1().DaemonSets(driverNS).Get(ctx, "computedomain-uid-2", metav1.GetOptions{})
		ch, errCh := e.kube.ResourceV1().ResourceClaimTemplates("team-a").Get(ctx, "chan", metav1.GetOptions{})
		return apierrors.IsNotFound(errOld) && errNew == nil && errCh == nil && ch.Labels[label] == "uid-2"
	}, waitFor, tick, "the old domain's objects are replaced by the new one's")
}

func TestStatusCoalesced(t *testing.T) {
	names := compat.Default()
	const nodes = 40
	var slices []runtime.Object
	for i := range nodes {
		node := fmt.Sprintf("node-%02d", i)
		slices = append(slices, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec: resourceapi.ResourceSliceSpec{Driver: names.ComputeDomain().Driver, NodeName: ptr.To(node),
				Devices: []resourceapi.Device{{Name: "daemon-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					CliqueAttribute: {StringValue: ptr.To(fmt.Sprintf("cluster-uuid.%d", i%2))}}}}}},
			// The GPU plugin's answer, read once at its start, is not the
			// node side's (the fake API server ignores the field selector).
			&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
				Spec: resourceapi.ResourceSliceSpec{Driver: names.Driver, NodeName: ptr.To(node),
					Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
						CliqueAttribute: {StringValue: ptr.To("stale.9")}}}}}})
	}
	e := newEnv(t, names, []schema.GroupVersionResource{nativeGVR}, slices,
		domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", nodes, "chan", ""))
	e.cfg.StatusDelay = 300 * time.Millisecond
	e.run(t)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		s, _, _ := unstructured.NestedString(e.get(t, nativeGVR, "team-a", "train").Object, "status", "status")
		return s == "NotReady"
	}, waitFor, tick, "a new domain gets status NotReady")
	before, start := e.patchCount("status"), time.Now()
	for i := range nodes {
		node := fmt.Sprintf("node-%02d", i)
		_, err := e.kube.CoreV1().Pods(driverNS).Create(ctx,
			daemonPod(names, "resource.gpudra.io/team-a/train", "uid-1", node, fmt.Sprintf("10.0.0.%d", i+1), true), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	span := time.Since(start)
	var cd *v1alpha1.ComputeDomain
	require.Eventually(t, func() bool {
		var err error
		cd, err = decode(e.get(t, nativeGVR, "team-a", "train"))
		return err == nil && cd.Status.Status == v1alpha1.DomainReady
	}, waitFor, tick, "the domain becomes Ready once its %d daemons are", nodes)
	assert.Len(t, cd.Status.Nodes, nodes)
	assert.Empty(t, v1alpha1.ValidateComputeDomainStatus(&cd.Status, field.NewPath("status")))
	for i, n := range cd.Status.Nodes {
		assert.Equal(t, fmt.Sprintf("cluster-uuid.%d", i%2), n.CliqueID, "the clique ID comes from the node's channel driver ResourceSlice")
		assert.Equal(t, int32(i/2), n.Index, "indices count per clique")
	}
	// At most one write per StatusDelay while events keep coming, plus the
	// one the last events schedule: one or two here, however slow the
	// machine is at creating the pods.
	writes := e.patchCount("status") - before
	bound := 2 + int(span/e.cfg.StatusDelay)
	assert.LessOrEqual(t, writes, bound, "%d pod events created in %s must end in at most %d status writes", nodes, span, bound)
	time.Sleep(3 * e.cfg.StatusDelay)
	assert.Equal(t, writes, e.patchCount("status")-before, "an unchanged status is not written again")
}

func TestConflictsCountedAndRetried(t *testing.T) {
	names := compat.Default()
	e := newEnv(t, names, []schema.GroupVersionResource{nativeGVR}, nil,
		domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", 0, "chan", ""))
	conflictOnce(&e.dyn.Fake, "patch", "computedomains", "", errConflict)
	conflictOnce(&e.dyn.Fake, "patch", "computedomains", "status", errThrottled)
	e.run(t)
	require.Eventually(t, func() bool {
		u := e.get(t, nativeGVR, "team-a", "train")
		s, _, _ := unstructured.NestedString(u.Object, "status", "status")
		return len(u.GetFinalizers()) == 1 && s == "NotReady"
	}, waitFor, tick, "finalizer and status are written after a 409 and a 429")
	assert.Equal(t, 1.0, e.counter(t, MetricWrites, map[string]string{"object": "finalizer", "result": "conflict"}))
	assert.Equal(t, 1.0, e.counter(t, MetricWrites, map[string]string{"object": "status", "result": "throttled"}))
	assert.Equal(t, 1.0, e.counter(t, MetricWrites, map[string]string{"object": "finalizer", "result": "success"}))
	assert.Equal(t, 1.0, e.counter(t, MetricWrites, map[string]string{"object": "status", "result": "success"}))
	assert.LessOrEqual(t, e.patchCount(""), 2, "no retry storm: one failed and one successful finalizer patch")
}

// TestCRDMissing: without a served ComputeDomain CRD, Run waits without an
// error and writes nothing; once the CRD is served it starts.
func TestCRDMissing(t *testing.T) {
	names := compat.Default()
	e := newEnv(t, names, []schema.GroupVersionResource{nativeGVR}, nil,
		domainObj(v1alpha1.SchemeGroupVersion, "team-a", "train", "uid-1", 0, "chan", ""))
	var installed atomic.Bool
	e.kube.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		if installed.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewNotFound(schema.GroupResource{}, nativeGVR.GroupVersion().String())
	})
	e.run(t)
	time.Sleep(5 * e.cfg.DiscoveryInterval)
	assert.Equal(t, 0, e.patchCount(""), "nothing is written while the CRD is missing")
	assert.Equal(t, 0.0, e.counter(t, MetricServed, nil))
	_, err := e.kube.ResourceV1().ResourceClaimTemplates("team-a").Get(context.Background(), "chan", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))

	installed.Store(true)
	require.Eventually(t, func() bool {
		_, err := e.kube.ResourceV1().ResourceClaimTemplates("team-a").Get(context.Background(), "chan", metav1.GetOptions{})
		return err == nil
	}, waitFor, tick, "the controller starts once the CRD is served")
	assert.Equal(t, 1.0, e.counter(t, MetricServed, nil))
}
