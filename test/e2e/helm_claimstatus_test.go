//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// testClaimStatusPolicy writes the status of a running pod's claim as the
// plugin's ServiceAccount (dry runs) with the chart's claim-status policy
// installed. From Kubernetes 1.36 the API server's own checks
// (resourceclaims/binding, resourceclaims/driver with associated-node verbs)
// refuse most of what the policy refuses, and they run first; a denial by
// either counts there. The policy alone is seen refusing a token bound to no
// node, which the API server lets through when nothing changes. What the
// plugin does (its own driver's entries on its own node's claims) must pass
// both.
func testClaimStatusPolicy(t *testing.T, ns, user, policy string) {
	name := statusWriterClaim(t, ns)
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := allocatedNode(claim)
	if node == "" {
		t.Fatalf("claim %s/%s has no single-node allocation: %+v", ns, name, claim.Status.Allocation)
	}
	onNode := impersonate(t, user, node)
	elsewhere := impersonate(t, user, "not-"+node)
	unbound := impersonate(t, user, "")

	ourEntries := func(c *resourceapi.ResourceClaim) {
		c.Status.Devices = nil
		for _, r := range c.Status.Allocation.Devices.Results {
			c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool,
				Device: r.Device, Data: &runtime.RawExtension{Raw: []byte(`{"e2e":"` + time.Now().Format(time.RFC3339Nano) + `"}`)}})
		}
	}
	dropReservedFor := func(c *resourceapi.ResourceClaim) { c.Status.ReservedFor = nil }
	noChange := func(*resourceapi.ResourceClaim) {}

	// The policy takes a moment to be enforced after it is created.
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			return isPolicyDenial(writeClaimStatus(unbound, ns, name, noChange)), nil
		})
	if err != nil {
		t.Fatalf("an unchanged claim status written with a token bound to no node was never denied by %s", policy)
	}

	for _, tc := range []struct {
		name       string
		err        error
		allowed    bool
		policyOnly bool // only the policy refuses it
	}{
		{"own driver's entries on own node's claim", writeClaimStatus(onNode, ns, name, ourEntries), true, false},
		{"unchanged status on own node's claim", writeClaimStatus(onNode, ns, name, noChange), true, false},
		{"own driver's entries on another node's claim", writeClaimStatus(elsewhere, ns, name, ourEntries), false, false},
		{"reservedFor", writeClaimStatus(onNode, ns, name, dropReservedFor), false, false},
		{"unchanged status, token bound to no node", writeClaimStatus(unbound, ns, name, noChange), false, true},
	} {
		switch {
		case tc.allowed && tc.err != nil:
			t.Errorf("%s: refused: %v", tc.name, tc.err)
		case !tc.allowed && tc.policyOnly && !isPolicyDenial(tc.err):
			t.Errorf("%s: want a denial by %s, got %v", tc.name, policy, tc.err)
		case !tc.allowed && !isPolicyDenial(tc.err) && !isClaimStatusAuthzDenial(tc.err):
			t.Errorf("%s: want a denial by %s or the API server's claim status authorization, got %v", tc.name, policy, tc.err)
		}
	}
}

// statusWriterClaim returns the name of a claim allocated on one node: a
// running pod's, or, on an API-server-only cluster, one allocated by hand.
func statusWriterClaim(t *testing.T, ns string) string {
	t.Helper()
	if apiserverOnly {
		return fixtureClaim(t, ns)
	}
	applyYAML(t, ns, strings.ReplaceAll(claimPod, "POD", "status-writer"))
	waitRunning(t, ns, "status-writer")
	return *pod(t, ns, "status-writer").Status.ResourceClaimStatuses[0].ResourceClaimName
}

// writeClaimStatus gets the claim, changes it with mutate and writes its
// status as c (a dry run).
func writeClaimStatus(c kubernetes.Interface, ns, name string, mutate func(*resourceapi.ResourceClaim)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(claim)
		_, err = c.ResourceV1().ResourceClaims(ns).UpdateStatus(context.Background(), claim, metav1.UpdateOptions{DryRun: dryRun})
		return err
	})
}

// allocatedNode is the one node a claim's allocation selects, or "".
func allocatedNode(c *resourceapi.ResourceClaim) string {
	if c.Status.Allocation == nil || c.Status.Allocation.NodeSelector == nil {
		return ""
	}
	terms := c.Status.Allocation.NodeSelector.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 || len(terms[0].MatchFields[0].Values) != 1 {
		return ""
	}
	return terms[0].MatchFields[0].Values[0]
}

// isClaimStatusAuthzDenial: the API server's own check of status writes
// (Kubernetes 1.36+) refused one.
func isClaimStatusAuthzDenial(err error) bool {
	return err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) &&
		(strings.Contains(err.Error(), `resource="resourceclaims/driver"`) || strings.Contains(err.Error(), `resource="resourceclaims/binding"`))
}
