package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func claimObj(uid, name string, owner *metav1.OwnerReference, pods ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	if owner != nil {
		c.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor,
			resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("pod-" + p)})
	}
	return c
}

func TestClaimPods(t *testing.T) {
	isController := true
	podOwner := &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p1", UID: "pod-p1", Controller: &isController}
	for _, tc := range []struct {
		name     string
		observed *resourceapi.ResourceClaim // at prepare
		server   *resourceapi.ResourceClaim // in the API server; nil: not found
		fail     bool                       // the API server answers an error
		after    time.Duration              // since Observe
		want     []string
		gets     int
	}{
		{name: "observed at prepare, fresh", observed: claimObj("u1", "c", nil, "p1"),
			server: claimObj("u1", "c", nil, "p1", "p2"), want: []string{"p1"}},
		{name: "shared claim read again after the refresh", observed: claimObj("u1", "c", nil, "p1"),
			server: claimObj("u1", "c", nil, "p2", "p1"), after: 2 * time.Minute, want: []string{"p1", "p2"}, gets: 1},
		{name: "a pod's own claim is never read again", observed: claimObj("u1", "c", podOwner, "p1"),
			server: claimObj("u1", "c", podOwner, "p1", "x"), after: time.Hour, want: []string{"p1"}},
		{name: "prepared before a restart: read at once", server: claimObj("u1", "c", nil, "p1"),
			want: []string{"p1"}, gets: 1},
		{name: "deleted", observed: claimObj("u1", "c", nil, "p1"), after: 2 * time.Minute, gets: 1},
		{name: "replaced by a claim of the same name", observed: claimObj("u1", "c", nil, "p1"),
			server: claimObj("u2", "c", nil, "p9"), after: 2 * time.Minute, gets: 1},
		{name: "API error keeps what was known", observed: claimObj("u1", "c", nil, "p1"), fail: true,
			after: 2 * time.Minute, want: []string{"p1"}, gets: 1},
		{name: "not a pod", server: func() *resourceapi.ResourceClaim {
			c := claimObj("u1", "c", nil)
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "example.com", Resource: "jobs", Name: "j"}}
			return c
		}(), gets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.server != nil {
				objs = append(objs, tc.server)
			}
			client := fake.NewClientset(objs...)
			if tc.fail {
				client.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("apiserver down")
				})
			}
			now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
			c := &ClaimPods{Client: client, now: func() time.Time { return now }}
			if tc.observed != nil {
				c.Observe(tc.observed)
			}
			now = now.Add(tc.after)
			got := c.Pods(context.Background(), ClaimRef{Namespace: "ns", Name: "c", UID: "u1"})
			assert.Equal(t, tc.want, got)
			gets := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "get" {
					gets++
				}
			}
			assert.Equal(t, tc.gets, gets)
		})
	}
}

func TestClaimPodsForget(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	c := &ClaimPods{now: func() time.Time { return now }}
	c.Observe(claimObj("u1", "a", nil, "p1"))
	c.Observe(claimObj("u2", "b", nil, "p2"))
	c.Forget(map[string]bool{"u1": true})
	assert.Len(t, c.entries, 2, "just observed: kept although not held yet")
	now = now.Add(2 * time.Minute)
	c.Forget(map[string]bool{"u1": true})
	assert.Equal(t, []string{"p1"}, c.Pods(context.Background(), ClaimRef{UID: "u1"}), "no client: what was observed")
	assert.Nil(t, c.Pods(context.Background(), ClaimRef{UID: "u2"}), "released and forgotten")
}

// TestClaimPodsBackoff: after a failed read no claim is read for a while.
func TestClaimPodsBackoff(t *testing.T) {
	client := fake.NewClientset(claimObj("u1", "a", nil, "p1"), claimObj("u2", "b", nil, "p2"))
	fail := true
	client.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, errors.New("apiserver down")
		}
		return false, nil, nil
	})
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	c := &ClaimPods{Client: client, now: func() time.Time { return now }}
	ctx := context.Background()
	assert.Nil(t, c.Pods(ctx, ClaimRef{Namespace: "ns", Name: "a", UID: "u1"}))
	assert.Nil(t, c.Pods(ctx, ClaimRef{Namespace: "ns", Name: "b", UID: "u2"}), "not asked: backing off")
	assert.Len(t, client.Actions(), 1)
	fail = false
	now = now.Add(claimReadBackoff)
	assert.Equal(t, []string{"p2"}, c.Pods(ctx, ClaimRef{Namespace: "ns", Name: "b", UID: "u2"}))
}
