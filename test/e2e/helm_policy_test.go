//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

const nodeNameExtra = "authentication.kubernetes.io/node-name"

// TestHelmPluginAdmissionPolicy installs the plugin's ServiceAccount, RBAC
// and ValidatingAdmissionPolicy from the chart (under a release name of its
// own, removed afterwards) and acts as that ServiceAccount, with the node
// name a pod-bound token carries, against the cluster's real ResourceSlices.
// Every write is a dry run: admission runs, nothing changes.
func TestHelmPluginAdmissionPolicy(t *testing.T) {
	skipWithoutHelm(t)
	ns := namespace(t)
	release := fmt.Sprintf("vap%05d", rand.IntN(100000))
	var objs []*unstructured.Unstructured
	for _, o := range helmTemplate(t, release, ns, "--values", chartDir()+"/values-simulated.yaml") {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if strings.Contains(o.GetName(), "kubelet-plugin") {
				objs = append(objs, o)
			}
		}
	}
	if len(objs) != 9 {
		t.Fatalf("found %d plugin RBAC and policy objects, want 9 (ServiceAccount, ClusterRole and binding, three policies and bindings)", len(objs))
	}
	path := writeList(t, objs)
	if out, err := kubectl("apply", "-f", path); err != nil {
		t.Fatalf("install the plugin's RBAC and policy: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "--wait=false", "-f", path) })
	policyName := release + "-gpudra-kubelet-plugin-resourceslices"
	waitPolicyTypeChecked(t, policyName)
	claimPolicy := release + "-gpudra-kubelet-plugin-claimstatus"
	waitPolicyTypeChecked(t, claimPolicy)

	slice := someSlice(t)
	node := *slice.Spec.NodeName
	user := "system:serviceaccount:" + ns + ":" + release + "-gpudra-kubelet-plugin"
	onNode := impersonate(t, user, node)
	elsewhere := impersonate(t, user, "not-"+node)
	unbound := impersonate(t, user, "")

	// The policy takes a moment to be enforced after it is created.
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			return isPolicyDenial(createSlice(elsewhere, node, driver)), nil
		})
	if err != nil {
		t.Fatalf("creating a slice of node %s as the plugin of another node was never denied by %s", node, policyName)
	}

	for _, tc := range []struct {
		name    string
		err     error
		allowed bool
	}{
		{"create own node's slice", createSlice(onNode, node, driver), true},
		{"create another node's slice", createSlice(onNode, "not-"+node, driver), false},
		// The scheduler keys allocated devices by driver, pool and device
		// name: a slice of this node in another node's pool could make
		// that node's GPUs look allocated.
		{"create own node's slice in another node's pool", createSliceInPool(onNode, node, "not-"+node, driver), false},
		{"create another driver's slice", createSlice(onNode, node, "other.example.com"), false},
		{"create with a token bound to no node", createSlice(unbound, node, driver), false},
		{"update own node's slice", updateSlice(onNode, slice.Name), true},
		{"update another node's slice", updateSlice(elsewhere, slice.Name), false},
		{"delete own node's slice", deleteSlice(onNode, slice.Name), true},
		{"delete another node's slice", deleteSlice(elsewhere, slice.Name), false},
	} {
		switch {
		case tc.allowed && tc.err != nil:
			t.Errorf("%s: refused: %v", tc.name, tc.err)
		case !tc.allowed && !isPolicyDenial(tc.err):
			t.Errorf("%s: want a denial by %s, got %v", tc.name, policyName, tc.err)
		}
	}

	t.Run("claim status", func(t *testing.T) { testClaimStatusPolicy(t, ns, user, claimPolicy) })

	// RBAC: what the plugin may do, and a sample of what it may not.
	for _, tc := range []struct {
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}{
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Verb: "get", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Verb: "list", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "driver", Name: driver, Verb: "associated-node:update", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "driver", Name: "other.example.com", Verb: "associated-node:update", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "resourceclaims", Subresource: "binding", Verb: "update", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Group: "resource.k8s.io", Resource: "deviceclasses", Verb: "create"}, false},
		{authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "get"}, true},
		{authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "update"}, false},
		{authorizationv1.ResourceAttributes{Resource: "secrets", Verb: "get", Namespace: ns}, false},
	} {
		sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &tc.attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf("%s %s/%s %s: allowed=%v, want %v", tc.attrs.Verb, tc.attrs.Resource, tc.attrs.Subresource, tc.attrs.Name, sar.Status.Allowed, tc.allowed)
		}
	}
}

// impersonate returns a client acting as user with node as the token's node
// (none when empty).
func impersonate(t *testing.T, user, node string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// someSlice returns a ResourceSlice of our driver that a plugin published.
func someSlice(t *testing.T) *resourceapi.ResourceSlice {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + driver})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Spec.NodeName != nil {
			return &list.Items[i]
		}
	}
	t.Fatalf("no ResourceSlice of driver %s with a node name", driver)
	return nil
}

var dryRun = []string{metav1.DryRunAll}

func createSlice(c kubernetes.Interface, node, drv string) error {
	return createSliceInPool(c, node, node, drv)
}

func createSliceInPool(c kubernetes.Interface, node, pool, drv string) error {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vap-test-"},
		Spec: resourceapi.ResourceSliceSpec{Driver: drv, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1}},
	}
	_, err := c.ResourceV1().ResourceSlices().Create(context.Background(), s, metav1.CreateOptions{DryRun: dryRun})
	return err
}

func updateSlice(c kubernetes.Interface, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := client.ResourceV1().ResourceSlices().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Labels = map[string]string{"gpudra.io/vap-test": "1"}
		_, err = c.ResourceV1().ResourceSlices().Update(context.Background(), s, metav1.UpdateOptions{DryRun: dryRun})
		return err
	})
}

func deleteSlice(c kubernetes.Interface, name string) error {
	return c.ResourceV1().ResourceSlices().Delete(context.Background(), name, metav1.DeleteOptions{DryRun: dryRun})
}

// isPolicyDenial tells a denial by the admission policy from other errors
// (RBAC, validation).
func isPolicyDenial(err error) bool {
	return err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) &&
		strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
}

// waitPolicyTypeChecked waits for the API server to type-check the policy's
// CEL and fails on any warning.
func waitPolicyTypeChecked(t *testing.T, name string) {
	t.Helper()
	if apiserverOnly {
		// The type check's result is written by kube-controller-manager,
		// which an API-server-only cluster does not run: the policy's
		// allowed and denied cases are what show it works on this version
		// (an expression that did not compile would fail every request or
		// none of them).
		waitPolicyExists(t, name)
		return
	}
	var p *admissionv1.ValidatingAdmissionPolicy
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			var err error
			p, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.TypeChecking != nil, nil
		})
	if err != nil {
		t.Fatalf("policy %s was never type-checked: %v", name, err)
	}
	for _, w := range p.Status.TypeChecking.ExpressionWarnings {
		t.Errorf("policy %s, %s: %s", name, w.FieldRef, w.Warning)
	}
}

func waitPolicyExists(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			_, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			return err == nil, nil
		})
	if err != nil {
		t.Fatalf("policy %s was never created: %v", name, err)
	}
}
