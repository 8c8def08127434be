//go:build e2e

package e2e

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authentication/user"

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
