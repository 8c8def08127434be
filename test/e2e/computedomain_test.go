//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// TestComputeDomainController runs the gpu-controller's ComputeDomain
// controller against the installed chart: a domain gets its finalizer, the
// workload's channel ResourceClaimTemplate in its namespace, the IMEX
// daemons' template and DaemonSet in the release's namespace and a NotReady
// status (no node has joined: the node side does not exist yet); the webhook
// refuses a change of the immutable spec; deleting the domain removes all
// three objects and then the domain itself.
func TestComputeDomainController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := namespace(t)
	names := compat.Default().ComputeDomain()
	release := realCluster.Config().Namespace
	applyYAML(t, ns, `apiVersion: resource.gpudra.io/v1alpha1
kind: ComputeDomain
metadata: {name: job}
spec:
  numNodes: 2
  channel:
    resourceClaimTemplate: {name: job-channel}
`)
	var cd v1alpha1.ComputeDomain
	getDomain := func() error {
		out, err := kubectl("-n", ns, "get", "computedomains.resource.gpudra.io", "job", "-o", "json")
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		cd = v1alpha1.ComputeDomain{}
		return json.Unmarshal([]byte(out), &cd)
	}
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := getDomain(); err != nil {
			return false, err
		}
		return len(cd.Finalizers) > 0 && cd.Status.Status == v1alpha1.DomainNotReady, nil
	})
	if err != nil {
		t.Fatalf("the controller gave the domain no finalizer or status: %v (domain %+v)", err, cd)
	}
	if len(cd.Status.Nodes) != 0 {
		t.Errorf("status lists nodes %v; no node can have joined", cd.Status.Nodes)
	}
	daemons := "computedomain-" + string(cd.UID)

	waitFor := func(what string, get func(context.Context) error) {
		t.Helper()
		var last error
		err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			last = get(ctx)
			return last == nil, nil
		})
		if err != nil {
			t.Fatalf("%s: %v (last: %v)", what, err, last)
		}
	}
	waitFor("channel template", func(ctx context.Context) error {
		tpl, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "job-channel", metav1.GetOptions{})
		if err != nil {
			return err
		}
		reqs := tpl.Spec.Spec.Devices.Requests
		if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != names.ChannelClass {
			t.Errorf("channel template requests %+v, want one request of class %s", reqs, names.ChannelClass)
		}
		if !slices.ContainsFunc(tpl.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == cd.UID }) {
			t.Errorf("channel template owners %+v do not include the domain %s", tpl.OwnerReferences, cd.UID)
		}
		return nil
	})
	waitFor("daemon template", func(ctx context.Context) error {
		_, err := client.ResourceV1().ResourceClaimTemplates(release).Get(ctx, daemons, metav1.GetOptions{})
		return err
	})
	waitFor("daemon DaemonSet", func(ctx context.Context) error {
		ds, err := client.AppsV1().DaemonSets(release).Get(ctx, daemons, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.CurrentNumberScheduled != 0 {
			t.Errorf("DaemonSet %s runs on %d nodes; no node carries the domain's label", daemons, ds.Status.CurrentNumberScheduled)
		}
		return nil
	})

	// The spec is immutable: the webhook refuses a change.
	out, err := kubectl("-n", ns, "patch", "computedomains.resource.gpudra.io", "job", "--type=merge", "-p", `{"spec":{"numNodes":3}}`)
	if err == nil || !strings.Contains(strings.ToLower(out), "immutable") {
		t.Errorf("changing numNodes: err %v, output %s; want a refusal that says the spec is immutable", err, out)
	}

	if out, err := kubectl("-n", ns, "delete", "computedomains.resource.gpudra.io", "job", "--wait=false"); err != nil {
		t.Fatalf("delete the domain: %v: %s", err, out)
	}
	waitFor("cleanup", func(ctx context.Context) error {
		var left []string
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "job-channel", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "channel template")
		}
		if _, err := client.ResourceV1().ResourceClaimTemplates(release).Get(ctx, daemons, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "daemon template")
		}
		if _, err := client.AppsV1().DaemonSets(release).Get(ctx, daemons, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "DaemonSet")
		}
		if out, err := kubectl("-n", ns, "get", "computedomains.resource.gpudra.io", "job", "--ignore-not-found", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
			left = append(left, "the domain itself")
		}
		if len(left) > 0 {
			return fmt.Errorf("still there: %s", strings.Join(left, ", "))
		}
		return nil
	})
}
