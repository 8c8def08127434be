package computedomain

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/test/chart"
)

var podGVR = corev1.SchemeGroupVersion.WithResource("pods")

// mergePatch applies a JSON merge patch (RFC 7386) to pod, as the API
// server does.
func mergePatch(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	var doc, p any
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NoError(t, json.Unmarshal(patch, &p))
	var merge func(doc, p any) any
	merge = func(doc, p any) any {
		pm, ok := p.(map[string]any)
		if !ok {
			return p
		}
		dm, ok := doc.(map[string]any)
		if !ok {
			dm = map[string]any{}
		}
		for k, v := range pm {
			if v == nil {
				delete(dm, k)
			} else {
				dm[k] = merge(dm[k], v)
			}
		}
		return dm
	}
	raw, err = json.Marshal(merge(doc, p))
	require.NoError(t, err)
	out := &corev1.Pod{}
	require.NoError(t, json.Unmarshal(raw, out))
	return out
}

// TestChartConfinesNudges: the chart gives the controller patch on pods
// only with nudges on, and its -pods policy admits the nudges the
// controller writes on a pod its DaemonSet makes (the real DaemonSet of
// this package) and nothing else: no other change of that pod, no change
// of another pod of the namespace, no create, delete or subresource.
// Other users are not checked.
func TestChartConfinesNudges(t *testing.T) {
	for _, tc := range chartModes() {
		t.Run(tc.mode, func(t *testing.T) {
			r := render(t, tc.args...)
			require.Equal(t, []string{"list", "watch", "patch"}, podVerbs(t, tc.args...))
			name := strings.TrimPrefix(r.user, "system:serviceaccount:"+driverNS+":")
			policy := chart.Policy(t, name+"-pods", tc.args...)

			c := &Controller{cfg: Config{Names: tc.names, Namespace: driverNS, DaemonImage: r.image}, cd: tc.names.ComputeDomain()}
			cd := &v1alpha1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", UID: "uid-1"},
				Spec: v1alpha1.ComputeDomainSpec{Channel: &v1alpha1.ComputeDomainChannel{
					ResourceClaimTemplate: v1alpha1.ChannelClaimTemplate{Name: "chan"}}}}
			ds, err := c.daemonSet(key{v1alpha1.GroupName, "team-a", "train"}, cd)
			require.NoError(t, err)
			// The pod the DaemonSet controller makes of it, bound.
			pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-x7k2p", Namespace: driverNS, UID: "pod-uid",
					Labels: ds.Spec.Template.Labels, Annotations: ds.Spec.Template.Annotations,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: "ds-uid",
						Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}},
				Spec: *ds.Spec.Template.Spec.DeepCopy()}
			pod.Spec.NodeName = "node-a"
			require.True(t, c.isDaemonPod(pod), "the controller nudges this pod")
			body := func(n int) []byte {
				b, err := nudgeBody(n)
				require.NoError(t, err)
				return b
			}
			nudged := mergePatch(t, pod, body(1))
			require.Equal(t, "1", nudged.Annotations[NudgeAnnotation])

			change := func(from *corev1.Pod, f func(*corev1.Pod)) *corev1.Pod {
				p := mergePatch(t, from, body(2))
				f(p)
				return p
			}
			image := change(nudged, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.example/x" })
			label := change(nudged, func(p *corev1.Pod) { p.Labels = map[string]string{c.cd.Label: "uid-1", "x": "y"} })
			moved := change(nudged, func(p *corev1.Pod) { p.Labels = map[string]string{c.cd.Label: "uid-2"} })
			other := change(nudged, func(p *corev1.Pod) { p.Annotations["example.com/x"] = "y" })
			ref := change(nudged, func(p *corev1.Pod) { p.Annotations[RefAnnotation] = "resource.gpudra.io/team-b/train" })
			unref := change(nudged, func(p *corev1.Pod) { delete(p.Annotations, RefAnnotation) })
			word := change(nudged, func(p *corev1.Pod) { p.Annotations[NudgeAnnotation] = "now; rm -rf /" })
			orphan := change(nudged, func(p *corev1.Pod) { p.OwnerReferences = nil })
			finalizer := change(nudged, func(p *corev1.Pod) { p.Finalizers = []string{"example.com/keep"} })
			gates := change(nudged, func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "x"}) })
			// A kubelet plugin pod of the release (privileged, not the
			// controller's); a pod labelled as a daemon but made by another
			// DaemonSet; a daemon pod in another namespace.
			plugin := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: "gpudra-kubelet-plugin-abcde", Namespace: driverNS,
				Labels: map[string]string{"app.kubernetes.io/name": "gpudra"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "gpudra-kubelet-plugin",
					UID: "plugin-ds", Controller: ptrTo(true)}}},
				Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "plugin", Image: r.image}}}}
			impostor := pod.DeepCopy()
			impostor.OwnerReferences[0].Name = "gpudra-kubelet-plugin"
			elsewhere := pod.DeepCopy()
			elsewhere.Namespace = "team-a"
			for _, w := range []struct {
				name     string
				user     string
				sub      string
				obj, old *corev1.Pod
				allowed  bool
			}{
				{"the first nudge", r.user, "", nudged, pod, true},
				{"the next nudge", r.user, "", mergePatch(t, nudged, body(2)), nudged, true},
				{"the last nudge", r.user, "", mergePatch(t, nudged, body(MaxNudges)), nudged, true},
				{"an unchanged pod", r.user, "", nudged, nudged, true},
				{"a nudge with another image", r.user, "", image, nudged, false},
				{"a nudge with another label", r.user, "", label, nudged, false},
				{"a nudge to another domain", r.user, "", moved, nudged, false},
				{"a nudge with another annotation", r.user, "", other, nudged, false},
				{"a nudge with another domain reference", r.user, "", ref, nudged, false},
				{"a nudge without the domain reference", r.user, "", unref, nudged, false},
				{"a nudge that is not a count", r.user, "", word, nudged, false},
				{"a nudge that drops the owner", r.user, "", orphan, nudged, false},
				{"a nudge that adds a finalizer", r.user, "", finalizer, nudged, false},
				{"a nudge that adds a toleration", r.user, "", gates, nudged, false},
				{"nudge a kubelet plugin pod", r.user, "", mergePatch(t, plugin, body(1)), plugin, false},
				{"change a kubelet plugin pod's image", r.user, "", func() *corev1.Pod {
					p := plugin.DeepCopy()
					p.Spec.Containers[0].Image = "evil.example/x"
					return p
				}(), plugin, false},
				{"nudge a pod of another DaemonSet", r.user, "", mergePatch(t, impostor, body(1)), impostor, false},
				{"nudge a daemon pod in another namespace", r.user, "", mergePatch(t, elsewhere, body(1)), elsewhere, false},
				{"write a daemon pod's status", r.user, "status", nudged, pod, false},
				{"add an ephemeral container", r.user, "ephemeralcontainers", nudged, pod, false},
				{"create a pod", r.user, "", pod, nil, false},
				{"delete a daemon pod", r.user, "", nil, pod, false},
				{"another user changes a plugin pod's image", "system:serviceaccount:x:y", "", func() *corev1.Pod {
					p := plugin.DeepCopy()
					p.Spec.Containers[0].Image = "evil.example/x"
					return p
				}(), plugin, true},
				{"another user relabels a daemon pod", "system:serviceaccount:x:y", "", label, nudged, true},
			} {
				obj, old := runtime.Object(nil), runtime.Object(nil)
				if w.obj != nil {
					obj = w.obj
				}
				if w.old != nil {
					old = w.old
				}
				allowed, denials := chart.EvalSubresourceWrite(policy, w.user, podGVR, w.sub, "Pod", obj, old)
				assert.Equal(t, w.allowed, allowed, "%s: denials %v", w.name, denials)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		args := []string{"--set", "computeDomains.daemonNudgeAfter=0s"}
		assert.Equal(t, []string{"list", "watch"}, podVerbs(t, args...), "no patch without nudges")
		for _, o := range chart.OfKind(chart.Render(t, args...), "ValidatingAdmissionPolicy") {
			assert.False(t, strings.HasSuffix(o["metadata"].(map[string]any)["name"].(string), "-controller-pods"), "no -pods policy without nudges")
		}
	})
}

// podVerbs are the verbs of the controller's Role on pods.
func podVerbs(t *testing.T, args ...string) []string {
	t.Helper()
	var verbs []string
	for _, o := range chart.OfKind(chart.Render(t, args...), "Role") {
		role := &rbacv1.Role{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, role))
		if !strings.HasSuffix(role.Name, "-controller") {
			continue
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.Resources, "pods") {
				verbs = append(verbs, rule.Verbs...)
			}
		}
	}
	return verbs
}
