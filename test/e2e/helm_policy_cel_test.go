//go:build e2e

package e2e

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/chart"
)

// chartPolicy renders the chart and returns the compiled policy named
// <release>-gpudra-<suffix>.
func chartPolicy(t *testing.T, release, ns, suffix string, args ...string) validating.Validator {
	t.Helper()
	for _, o := range helmTemplate(t, release, ns, args...) {
		if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == release+"-gpudra-"+suffix {
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, p); err != nil {
				t.Fatal(err)
			}
			return compilePolicy(t, p)
		}
	}
	t.Fatalf("the chart renders no ValidatingAdmissionPolicy %s-gpudra-%s", release, suffix)
	return nil
}

// evalWrite runs v on a write of obj (nil for a delete) over old (nil for a
// create) of the given resource by userName, whose token carries node (none
// if empty), and returns whether it is admitted and the denials.
func evalWrite(v validating.Validator, userName, node string, gv schema.GroupVersion, kind, resource string, obj, old runtime.Object) (bool, []string) {
	u := &user.DefaultInfo{Name: userName}
	if node != "" {
		u.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	return chart.EvalWriteAs(v, u, gv.WithResource(resource), kind, obj, old)
}

// TestHelmSlicePolicyRules evaluates the chart's ResourceSlice policy with
// the API server's policy code, without a cluster: in particular that a
// plugin may not publish a pool other than its node's (the scheduler keys
// allocated devices by driver, pool and device, not node).
func TestHelmSlicePolicyRules(t *testing.T) {
	skipWithoutHelm(t)
	const ns, release = "gpudra-system", "x"
	v := chartPolicy(t, release, ns, "kubelet-plugin-resourceslices")
	plugin := "system:serviceaccount:" + ns + ":" + release + "-gpudra-kubelet-plugin"
	s := func(node, pool string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + pool},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
				Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1}},
		}
	}
	for _, tc := range []struct {
		name     string
		obj, old *resourceapi.ResourceSlice
		allowed  bool
	}{
		{"create own node's pool", s("n1", "n1"), nil, true},
		{"create own node with another node's pool", s("n1", "n2"), nil, false},
		{"update own node's pool", s("n1", "n1"), s("n1", "n1"), true},
		{"update into another node's pool", s("n1", "n2"), s("n1", "n1"), false},
		{"update a slice of another node's pool", s("n1", "n1"), s("n1", "n2"), false},
		{"delete own node's pool", nil, s("n1", "n1"), true},
		{"delete a slice of another node's pool", nil, s("n1", "n2"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj, old runtime.Object
			if tc.obj != nil {
				obj = tc.obj
			}
			if tc.old != nil {
				old = tc.old
			}
			allowed, denials := evalWrite(v, plugin, "n1", resourceapi.SchemeGroupVersion, "ResourceSlice", "resourceslices", obj, old)
			if allowed != tc.allowed {
				t.Errorf("allowed=%v, want %v; denials: %v", allowed, tc.allowed, denials)
			}
		})
	}
}

// TestHelmMPSPodPolicyRules evaluates the chart's MPS daemon Pod policy: the
// plugin's token may create and delete only daemon Pods of its own node, of
// the chart's shape.
func TestHelmMPSPodPolicyRules(t *testing.T) {
	skipWithoutHelm(t)
	const ns, release, uid = "gpudra-system", "x", "0b6e4c8e-0000-0000-0000-000000000001"
	const image = "registry.example.com/gpudra:t"
	v := chartPolicy(t, release, ns, "kubelet-plugin-mps-pods",
		"--set", "image.repository=registry.example.com/gpudra,image.tag=t,nvidiaDriverRoot=/run/nvidia/driver")
	plugin := "system:serviceaccount:" + ns + ":" + release + "-gpudra-kubelet-plugin"
	dir := "/var/lib/kubelet/plugins/" + driver + "/mps/" + uid
	daemon := func(edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: "gpudra-mps-" + uid, Namespace: ns, Labels: map[string]string{
				"app.kubernetes.io/component": "mps-control-daemon", "gpudra.io/mps-node": "n1", "gpudra.io/mps-claim-uid": uid}},
			Spec: corev1.PodSpec{NodeName: "n1", AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "mps", Image: image,
					Command: []string{"/usr/local/bin/gpu-kubelet-plugin"}, Args: []string{"mps-control-daemon"}}},
				Volumes: []corev1.Volume{
					{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/nvidia/driver"}}},
					{Name: "dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}},
				}},
		}
		if edit != nil {
			edit(p)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		obj, old *corev1.Pod
		allowed  bool
	}{
		{"create a daemon Pod of its node", daemon(nil), nil, true},
		{"delete a daemon Pod of its node", nil, daemon(nil), true},
		{"create a daemon Pod of another node", daemon(func(p *corev1.Pod) {
			p.Spec.NodeName, p.Labels["gpudra.io/mps-node"] = "n2", "n2"
		}), nil, false},
		{"delete a daemon Pod of another node", nil, daemon(func(p *corev1.Pod) {
			p.Spec.NodeName, p.Labels["gpudra.io/mps-node"] = "n2", "n2"
		}), false},
		{"another image", daemon(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "busybox" }), nil, false},
		{"another command", daemon(func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"sh"} }), nil, false},
		{"host network", daemon(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), nil, false},
		{"a ServiceAccount token", daemon(func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }), nil, false},
		{"a host path outside the driver root and the MPS directory", daemon(func(p *corev1.Pod) {
			p.Spec.Volumes[1].HostPath.Path = "/etc"
		}), nil, false},
		{"another name", daemon(func(p *corev1.Pod) { p.Name = "workload" }), nil, false},
		{"create the daemon Pod of a further config group", daemon(func(p *corev1.Pod) {
			p.Name, p.Labels["gpudra.io/mps-group"] = "gpudra-mps-"+uid+"-g1", "1"
		}), nil, true},
		{"delete the daemon Pod of a further config group", nil, daemon(func(p *corev1.Pod) {
			p.Name, p.Labels["gpudra.io/mps-group"] = "gpudra-mps-"+uid+"-g2", "2"
		}), true},
		{"a group suffix without its label", daemon(func(p *corev1.Pod) { p.Name = "gpudra-mps-" + uid + "-g1" }), nil, false},
		{"a group label that is no group number", daemon(func(p *corev1.Pod) {
			p.Name, p.Labels["gpudra.io/mps-group"] = "gpudra-mps-"+uid+"-gx", "x"
		}), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj, old runtime.Object
			if tc.obj != nil {
				obj = tc.obj
			}
			if tc.old != nil {
				old = tc.old
			}
			allowed, denials := evalWrite(v, plugin, "n1", corev1.SchemeGroupVersion, "Pod", "pods", obj, old)
			if allowed != tc.allowed {
				t.Errorf("allowed=%v, want %v; denials: %v", allowed, tc.allowed, denials)
			}
		})
	}
}
