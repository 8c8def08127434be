//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/gpudra/gpudra/test/chart"
)

// TestHelmClaimStatusPolicyRules evaluates the chart's claim-status policy
// with the API server's own policy code, without a cluster: a 1.37 API
// server refuses most of these writes itself before admission runs (see
// testClaimStatusPolicy), so this is where the policy's rules for 1.34-1.35
// are seen.
func TestHelmClaimStatusPolicyRules(t *testing.T) {
	skipWithoutHelm(t)
	const ns, release = "gpudra-system", "x"
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	for _, o := range helmTemplate(t, release, ns) {
		if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == release+"-gpudra-kubelet-plugin-claimstatus" {
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, policy); err != nil {
				t.Fatal(err)
			}
		}
	}
	if policy == nil {
		t.Fatal("the chart renders no claim-status ValidatingAdmissionPolicy")
	}
	v := compilePolicy(t, policy)
	plugin := "system:serviceaccount:" + ns + ":" + release + "-gpudra-kubelet-plugin"

	ours := statusEntry(driver, "n1", "gpu-0", `{"uuid":"GPU-1","health":"Healthy"}`)
	ours2 := statusEntry(driver, "n1", "gpu-0", `{"uuid":"GPU-1","health":"Unhealthy"}`)
	other := statusEntry("net.example.com", "n1", "nic-0", `{"a":1}`)
	other2 := statusEntry("net.example.com", "n1", "nic-0", `{"a":2}`)
	for _, tc := range []struct {
		name     string
		user     string
		node     string // in the token; "" for none
		old, obj *resourceapi.ResourceClaim
		allowed  bool
	}{
		{"own node: add own entries", plugin, "n1", statusClaim("n1", 1, "p"), statusClaim("n1", 1, "p", ours), true},
		{"own node: change own entries", plugin, "n1", statusClaim("n1", 1, "p", ours), statusClaim("n1", 1, "p", ours2), true},
		{"own node: remove own entries beside another driver's", plugin, "n1", statusClaim("n1", 1, "p", ours, other), statusClaim("n1", 1, "p", other), true},
		{"own node: entries reordered", plugin, "n1", statusClaim("n1", 1, "p", ours, other), statusClaim("n1", 1, "p", other, ours), true},
		{"other node: add own entries", plugin, "n2", statusClaim("n1", 1, "p"), statusClaim("n1", 1, "p", ours), false},
		{"other node: remove own entries", plugin, "n2", statusClaim("n1", 1, "p", ours), statusClaim("n1", 1, "p"), false},
		{"other node: no change", plugin, "n2", statusClaim("n1", 1, "p", ours), statusClaim("n1", 1, "p", ours), true},
		{"unallocated claim: no change", plugin, "n2", statusClaim("", 0, ""), statusClaim("", 0, ""), true},
		{"token bound to no node", plugin, "", statusClaim("n1", 1, "p"), statusClaim("n1", 1, "p"), false},
		{"deallocate", plugin, "n1", statusClaim("n1", 1, "p"), statusClaim("", 0, "p"), false},
		{"allocate", plugin, "n1", statusClaim("", 0, ""), statusClaim("n1", 1, ""), false},
		{"change reservedFor", plugin, "n1", statusClaim("n1", 1, "p"), statusClaim("n1", 1, "q"), false},
		{"clear reservedFor", plugin, "n1", statusClaim("n1", 1, "p"), statusClaim("n1", 1, ""), false},
		{"add another driver's entry", plugin, "n1", statusClaim("n1", 1, "p", ours), statusClaim("n1", 1, "p", ours, other), false},
		{"change another driver's entry", plugin, "n1", statusClaim("n1", 1, "p", ours, other), statusClaim("n1", 1, "p", ours, other2), false},
		{"allocation not on one node: change own entries", plugin, "n1", statusClaim("n1", 2, "p"), statusClaim("n1", 2, "p", ours), false},
		{"another user is not checked", "system:serviceaccount:kube-system:x", "", statusClaim("n1", 1, "p"), statusClaim("", 0, "q", other), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allowed, denials := evalPolicy(v, tc.user, tc.node, tc.obj, tc.old)
			if allowed != tc.allowed {
				t.Errorf("allowed=%v, want %v; denials: %v", allowed, tc.allowed, denials)
			}
		})
	}
}

// compilePolicy compiles a policy's variables, match conditions, validations
// and message expressions as the API server's admission plugin does.
func compilePolicy(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	return chart.CompilePolicy(t, p)
}

// evalPolicy runs v on a status update of a claim by userName, whose token
// carries node (none if empty), and returns whether it is admitted and the
// denials.
func evalPolicy(v validating.Validator, userName, node string, obj, old *resourceapi.ResourceClaim) (bool, []string) {
	u := &user.DefaultInfo{Name: userName}
	if node != "" {
		u.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	gvr := resourceapi.SchemeGroupVersion.WithResource("resourceclaims")
	gvk := resourceapi.SchemeGroupVersion.WithKind("ResourceClaim")
	attrs := admission.NewAttributesRecord(obj, old, gvk, obj.Namespace, obj.Name, gvr, "status", admission.Update,
		&metav1.UpdateOptions{}, false, u)
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk,
		VersionedObject: admission.NewLazyObject(obj), VersionedOldObject: admission.NewLazyObject(old)}
	res := v.Validate(context.Background(), gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
	var denials []string
	for _, d := range res.Decisions {
		if d.Action != validating.ActionAdmit {
			denials = append(denials, fmt.Sprintf("%s (%s): %s", d.Evaluation, d.Reason, d.Message))
		}
	}
	return len(denials) == 0, denials
}

// statusClaim is a claim allocated on node through a node selector with
// terms identical terms (not allocated if node is empty), reserved for pod
// reserved (if set), with the given status.devices.
func statusClaim(node string, terms int, reserved string, devices ...resourceapi.AllocatedDeviceStatus) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.io"}}}}},
	}
	if node != "" {
		sel := &corev1.NodeSelector{}
		for range terms {
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}})
		}
		c.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: sel, Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driver, Pool: node, Device: "gpu-0"}}}}
	}
	if reserved != "" {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: reserved, UID: types.UID("uid-" + reserved)}}
	}
	c.Status.Devices = devices
	return c
}

func statusEntry(drv, pool, device, data string) resourceapi.AllocatedDeviceStatus {
	return resourceapi.AllocatedDeviceStatus{Driver: drv, Pool: pool, Device: device, Data: &runtime.RawExtension{Raw: []byte(data)}}
}
