package computedomain

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

const (
	waitFor  = 10 * time.Second
	tick     = 10 * time.Millisecond
	driverNS = "gpudra-system"
	image    = "registry.example/gpudra:test"
)

var (
	nativeGVR = v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ComputeDomainResource)
	nvidiaGVR = compat.NVIDIAComputeDomains.WithResource(v1alpha1.ComputeDomainResource)
)

// domainObj is a ComputeDomain as the dynamic client holds it.
func domainObj(gv schema.GroupVersion, ns, name, uid string, numNodes int64, template, mode string) *unstructured.Unstructured {
	channel := map[string]any{"resourceClaimTemplate": map[string]any{"name": template}}
	if mode != "" {
		channel["allocationMode"] = mode
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gv.String(), "kind": v1alpha1.ComputeDomainKind,
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid},
		"spec":     map[string]any{"numNodes": numNodes, "channel": channel},
	}}
	return u
}

// env is a controller on fake clients.
type env struct {
	kube    *kubefake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	reg     *prometheus.Registry
	metrics *Metrics
	cfg     Config
	mu      sync.Mutex
	patches map[string]int // subresource ("" or status) -> patches seen
}

func newEnv(t *testing.T, names compat.Names, served []schema.GroupVersionResource, kubeObjs []runtime.Object, domains ...runtime.Object) *env {
	t.Helper()
	e := &env{kube: kubefake.NewClientset(kubeObjs...), reg: prometheus.NewRegistry(), patches: map[string]int{}}
	lists := map[schema.GroupVersionResource]string{nativeGVR: "ComputeDomainList", nvidiaGVR: "ComputeDomainList"}
	e.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, domains...)
	e.dyn.PrependReactor("patch", "computedomains", func(a clienttesting.Action) (bool, runtime.Object, error) {
		e.mu.Lock()
		e.patches[a.GetSubresource()]++
		e.mu.Unlock()
		return false, nil, nil
	})
	var err error
	e.metrics, err = NewMetrics(e.reg)
	require.NoError(t, err)
	var resources []*metav1.APIResourceList
	for _, gvr := range served {
		resources = append(resources, &metav1.APIResourceList{GroupVersion: gvr.GroupVersion().String(),
			APIResources: []metav1.APIResource{{Name: gvr.Resource, Namespaced: true, Kind: v1alpha1.ComputeDomainKind}}})
	}
	e.kube.Resources = resources
	e.cfg = Config{Client: e.kube, Dynamic: e.dyn, Names: names, Namespace: driverNS, DaemonImage: image, Metrics: e.metrics,
		StatusDelay: 50 * time.Millisecond, DiscoveryInterval: 50 * time.Millisecond}
	return e
}

// run runs the controller (Run, with discovery) until the test ends.
func (e *env) run(t *testing.T) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, e.cfg) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func (e *env) patchCount(sub string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.patches[sub]
}

func (e *env) get(t *testing.T, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := e.dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return u
}

// counter returns the value of a counter of the registry with the labels.
func (e *env) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := e.reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// daemonPod is a pod of a domain's DaemonSet on node.
func daemonPod(names compat.Names, ref, uid, node, ip string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "d-" + node, Namespace: driverNS, UID: types.UID("pod-" + node),
			Labels: map[string]string{names.ComputeDomain().Label: uid}, Annotations: map[string]string{RefAnnotation: ref}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// conflictOnce makes the first write of verb on resource (and
// subresource) fail with err.
func conflictOnce(f *clienttesting.Fake, verb, resource, sub string, err error) {
	var once sync.Once
	f.PrependReactor(verb, resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != sub {
			return false, nil, nil
		}
		hit := false
		once.Do(func() { hit = true })
		if hit {
			return true, nil, err
		}
		return false, nil, nil
	})
}

var errConflict = apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.GroupName, Resource: "computedomains"}, "x", nil)
var errThrottled = apierrors.NewTooManyRequests("slow down", 1)
