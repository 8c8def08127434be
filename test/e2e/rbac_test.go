//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHelmControllerRBACLeastPrivilege installs the controller's identity
// from the chart (default values: self-managed certificate, leader
// election), asks the API server what that ServiceAccount may do in its
// namespace (SelfSubjectRulesReview as the account: its Role and
// ClusterRole together) and compares the answer with the exact list of
// calls the controller makes. Anything more is a failure; the list is
// logged as the record of what the controller can do.
func TestHelmControllerRBACLeastPrivilege(t *testing.T) {
	skipWithoutHelm(t)
	ns := namespace(t)
	release := fmt.Sprintf("rbac%05d", rand.IntN(100000))
	name := release + "-gpudra-controller"
	var objs []*unstructured.Unstructured
	for _, o := range helmTemplate(t, release, ns) {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if o.GetName() == name {
				objs = append(objs, o)
			}
		}
	}
	if len(objs) != 5 {
		t.Fatalf("found %d controller identity objects named %s, want 5", len(objs), name)
	}
	path := writeList(t, objs)
	if out, err := kubectl("apply", "-f", path); err != nil {
		t.Fatalf("install the controller's RBAC: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "--wait=false", "-f", path) })

	user := "system:serviceaccount:" + ns + ":" + name
	got, incomplete := rules(t, user, ns)
	// What every ServiceAccount may do anyway (self reviews, discovery,
	// cluster defaults) is not the chart's doing.
	baseline, _ := rules(t, "system:serviceaccount:"+ns+":nobody", ns)
	got = slices.DeleteFunc(got, func(r string) bool { return slices.Contains(baseline, r) })
	t.Logf("the controller may, beyond any ServiceAccount:\n  %s", strings.Join(got, "\n  "))
	want := []string{
		"admissionregistration.k8s.io/validatingwebhookconfigurations get,list,update,watch " + name,
		// The ComputeDomain controller (computeDomains.controller, on by
		// default): its IMEX DaemonSets (updated after an upgrade) and their
		// pods in its namespace (patched to nudge their kubelet, confined to
		// that one annotation of daemon pods by the -pods admission policy),
		// the domains' templates anywhere, finalizer and status patches.
		"apps/daemonsets create,delete,list,update,watch ",
		"core/pods list,patch,watch ",
		"resource.gpudra.io/computedomains list,patch,watch ",
		"resource.gpudra.io/computedomains/status patch ",
		"resource.k8s.io/resourceclaimtemplates create,delete,list,watch ",
		"coordination.k8s.io/leases create ",
		"coordination.k8s.io/leases get,update " + name,
		"core/secrets create ",
		"core/secrets get,list,update,watch " + release + "-gpudra-webhook-tls",
		"events.k8s.io/events create,patch ",
		"resource.k8s.io/deviceclasses create,delete,get,list,update,watch ",
		"resource.k8s.io/resourceclaims list,watch ",
		"resource.k8s.io/resourceslices list,watch ",
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing permission the controller needs: %q", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("permission beyond what the controller does: %q", g)
		}
	}
	if incomplete != "" {
		t.Errorf("the rules review is incomplete: %s", incomplete)
	}
}

// rules lists what user may do in ns as "group/resource verbs names".
func rules(t *testing.T, user, ns string) ([]string, string) {
	review, err := impersonate(t, user, "").AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range review.Status.ResourceRules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				out = append(out, fmt.Sprintf("%s/%s %s %s", group(g), res, strings.Join(sorted(r.Verbs), ","), strings.Join(sorted(r.ResourceNames), ",")))
			}
		}
	}
	slices.Sort(out)
	incomplete := ""
	if review.Status.Incomplete {
		incomplete = review.Status.EvaluationError
	}
	return slices.Compact(out), incomplete
}

func group(g string) string {
	if g == "" {
		return "core"
	}
	return g
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
