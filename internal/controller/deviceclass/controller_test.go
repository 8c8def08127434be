package deviceclass

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
)

const (
	h100      = "NVIDIA H100 80GB HBM3"
	h100Class = "h100-80gb-hbm3.gpu.gpudra.io"
	l4        = "NVIDIA L4"
	l4Class   = "l4.gpu.gpudra.io"
	waitFor   = 10 * time.Second
	tick      = 10 * time.Millisecond
)

type harness struct {
	t        *testing.T
	client   *fake.Clientset
	ctrl     *Controller
	recorder *events.FakeRecorder
}

func start(t *testing.T, opts Options, objs ...runtime.Object) *harness {
	t.Helper()
	client := fake.NewClientset(objs...)
	return startWith(t, client, opts)
}

func startWith(t *testing.T, client *fake.Clientset, opts Options) *harness {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	recorder := events.NewFakeRecorder(100)
	ctrl, err := New(client, factory, recorder, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, ctrl.Run(ctx)) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
	})
	h := &harness{t: t, client: client, ctrl: ctrl, recorder: recorder}
	require.Eventually(t, ctrl.HasSynced, waitFor, tick)
	h.waitClass(GPUClassName)
	h.waitClass(MIGClassName)
	return h
}

func slice(name, driver string, products ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(name),
			Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}},
	}
	for i, p := range products {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": {StringValue: ptr.To("gpu")}, "productName": {StringValue: ptr.To(p)},
			},
		})
	}
	return s
}

func claim(name, class string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "preferred", DeviceClassName: class},
				{Name: "any", DeviceClassName: GPUClassName},
			},
		}}}},
	}
}

func (h *harness) get(name string) (*resourceapi.DeviceClass, error) {
	return h.client.ResourceV1().DeviceClasses().Get(context.Background(), name, metav1.GetOptions{})
}

func (h *harness) waitClass(name string) *resourceapi.DeviceClass {
	h.t.Helper()
	var c *resourceapi.DeviceClass
	require.Eventually(h.t, func() bool {
		var err error
		c, err = h.get(name)
		return err == nil
	}, waitFor, tick, "DeviceClass %s never appeared", name)
	return c
}

func (h *harness) waitGone(name string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		_, err := h.get(name)
		return apierrors.IsNotFound(err)
	}, waitFor, tick, "DeviceClass %s was not deleted", name)
}

// writes gives the controller time to act on the last change and returns
// the number of DeviceClass writes with verb so far.
func (h *harness) writes(verb string) int {
	time.Sleep(200 * time.Millisecond)
	n := 0
	for _, a := range h.client.Actions() {
		if a.GetResource().Resource == "deviceclasses" && a.GetVerb() == verb {
			n++
		}
	}
	return n
}

func TestBaseClasses(t *testing.T) {
	h := start(t, Options{ExtendedResourceName: "nvidia.com/gpu"})
	gpu := h.waitClass(GPUClassName)
	assert.Equal(t, ManagedByValue, gpu.Labels[ManagedByLabel])
	assert.Equal(t, BaseSelector("gpu"), gpu.Spec.Selectors[0].CEL.Expression)
	assert.Equal(t, ptr.To("nvidia.com/gpu"), gpu.Spec.ExtendedResourceName)
	mig := h.waitClass(MIGClassName)
	assert.Equal(t, BaseSelector("mig"), mig.Spec.Selectors[0].CEL.Expression)
	assert.Nil(t, mig.Spec.ExtendedResourceName)

	// Deleted: recreated.
	require.NoError(t, h.client.ResourceV1().DeviceClasses().Delete(t.Context(), GPUClassName, metav1.DeleteOptions{}))
	h.waitClass(GPUClassName)

	// Edited: repaired, foreign labels kept.
	edited := h.waitClass(MIGClassName)
	edited.Spec.Selectors[0].CEL.Expression = "true"
	edited.Labels["team"] = "ml"
	_, err := h.client.ResourceV1().DeviceClasses().Update(t.Context(), edited, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := h.get(MIGClassName)
		return err == nil && c.Spec.Selectors[0].CEL.Expression == BaseSelector("mig") && c.Labels["team"] == "ml"
	}, waitFor, tick)
}

func TestModelClassLifecycle(t *testing.T) {
	h := start(t, Options{PerModelClasses: true})
	slices := h.client.ResourceV1().ResourceSlices()

	// A model appears.
	_, err := slices.Create(t.Context(), slice("node-a", "gpu.gpudra.io", h100, h100), metav1.CreateOptions{})
	require.NoError(t, err)
	c := h.waitClass(h100Class)
	assert.Equal(t, ModelSelector(h100), c.Spec.Selectors[0].CEL.Expression)
	assert.Equal(t, "true", c.Labels[ModelLabel])
	assert.Equal(t, ManagedByValue, c.Labels[ManagedByLabel])
	assert.Equal(t, h100, c.Annotations[ProductNameAnnotation])
	creates := h.writes("create")

	// A second node with the same model: nothing new.
	_, err = slices.Create(t.Context(), slice("node-b", "gpu.gpudra.io", h100), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, creates, h.writes("create"))
	assert.Zero(t, h.writes("update"))

	// One node goes: the class stays; the last one goes: it is deleted.
	require.NoError(t, slices.Delete(t.Context(), "node-a", metav1.DeleteOptions{}))
	assert.Zero(t, h.writes("delete"))
	require.NoError(t, slices.Delete(t.Context(), "node-b", metav1.DeleteOptions{}))
	h.waitGone(h100Class)
	_, err = h.get(GPUClassName)
	require.NoError(t, err, "base classes are never deleted")
}

func TestModelClassKeptWhileClaimed(t *testing.T) {
	h := start(t, Options{PerModelClasses: true}, slice("node-a", "gpu.gpudra.io", l4))
	h.waitClass(l4Class)
	claims := h.client.ResourceV1().ResourceClaims("team-a")
	_, err := claims.Create(t.Context(), claim("wants-l4", l4Class), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = claims.Create(t.Context(), claim("wants-other", "other.example.com"), metav1.CreateOptions{})
	require.NoError(t, err)

	require.NoError(t, h.client.ResourceV1().ResourceSlices().Delete(t.Context(), "node-a", metav1.DeleteOptions{}))
	assert.Zero(t, h.writes("delete"))
	h.waitClass(l4Class)

	require.NoError(t, claims.Delete(t.Context(), "wants-l4", metav1.DeleteOptions{}))
	h.waitGone(l4Class)
}

func TestUnmanagedClassesUntouched(t *testing.T) {
	foreign := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: l4Class},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}}},
	}
	static := BaseClasses("nvidia.com/gpu")[0]
	static.Labels = nil
	static.Spec.Selectors[0].CEL.Expression = "device.driver == \"gpu.gpudra.io\""
	h := start(t, Options{PerModelClasses: true}, foreign, static, slice("node-a", "gpu.gpudra.io", l4))

	assert.Zero(t, h.writes("update"))
	for _, name := range []string{l4Class, GPUClassName} {
		c, err := h.get(name)
		require.NoError(t, err)
		assert.Nil(t, c.Labels, name)
	}
	reported := map[string]bool{}
	for len(h.recorder.Events) > 0 {
		e := <-h.recorder.Events
		assert.Contains(t, e, "Warning NameConflict")
		reported[e] = true
	}
	assert.Len(t, reported, 2, "one conflict event per class: %v", reported)

	// Without the model the foreign class is still not deleted.
	require.NoError(t, h.client.ResourceV1().ResourceSlices().Delete(t.Context(), "node-a", metav1.DeleteOptions{}))
	assert.Zero(t, h.writes("delete"))
}

func TestIgnoredDevices(t *testing.T) {
	mig := slice("node-m", "gpu.gpudra.io", "NVIDIA A100-SXM4-40GB")
	mig.Spec.Devices[0].Attributes["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To("mig")}
	h := start(t, Options{PerModelClasses: true}, mig, slice("node-o", "other.example.com", h100))
	assert.Equal(t, 2, h.writes("create"), "only the base classes")
}

func TestPerModelClassesOff(t *testing.T) {
	existing, err := ModelClass(h100)
	require.NoError(t, err)
	h := start(t, Options{}, existing, slice("node-a", "gpu.gpudra.io", l4))
	assert.Equal(t, 2, h.writes("create"), "only the base classes")
	assert.Zero(t, h.writes("delete"), "existing model classes are left alone")
}

// TestExtendedResourceDropped simulates an API server without the
// DRAExtendedResource feature: the controller must not update forever.
func TestExtendedResourceDropped(t *testing.T) {
	client := fake.NewClientset()
	strip := func(action k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := action.(k8stesting.CreateAction); ok {
			if c, ok := o.GetObject().(*resourceapi.DeviceClass); ok {
				c.Spec.ExtendedResourceName = nil
			}
		}
		return false, nil, nil
	}
	client.PrependReactor("create", "deviceclasses", strip)
	client.PrependReactor("update", "deviceclasses", strip)
	h := startWith(t, client, Options{ExtendedResourceName: "nvidia.com/gpu"})
	assert.Equal(t, 1, h.writes("update"), "one repair attempt, then the dropped field is ignored")
}
