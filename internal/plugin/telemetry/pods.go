package telemetry

import (
	"context"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// DefaultPodRefresh is how long the pods of a shareable claim are trusted
// before the claim is read again.
const DefaultPodRefresh = time.Minute

// claimReadTimeout bounds one claim read, and after a failed read no claim
// is read for claimReadBackoff: an API server that is down delays a sample
// by one timeout, not one per claim.
const (
	claimReadTimeout = 5 * time.Second
	claimReadBackoff = 10 * time.Second
)

// ClaimPods knows which pods each prepared claim is reserved for (its
// status.reservedFor). The kubelet prepares a claim once, for its first
// pod, so the claim's object at prepare time is a first answer (Observe).
// A claim made from a pod's ResourceClaimTemplate belongs to that pod and
// serves no other: it is never read again. Any other claim may be shared
// by more pods later, so it is read from the API server again when its
// answer is older than Refresh — by the sampler, never on the prepare path.
// A claim the plugin did not see prepared (prepared before a restart) is
// read at its first sample.
type ClaimPods struct {
	// Client reads claims; nil: only what Observe recorded is known.
	Client kubernetes.Interface
	// Refresh defaults to DefaultPodRefresh.
	Refresh time.Duration

	mu      sync.Mutex
	entries map[string]*podEntry // by claim UID
	// failed: the last read failed (logged once until one succeeds) at
	// failedAt; no claim is read for claimReadBackoff after a failure.
	failed   bool
	failedAt time.Time
	now      func() time.Time
}

type podEntry struct {
	pods []string
	read time.Time
	// fixed: the claim belongs to a pod; its pods cannot change.
	fixed bool
}

// Observe records the pods of a claim from its object, e.g. the one the
// kubelet passed to prepare.
func (c *ClaimPods) Observe(claim *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store(string(claim.UID), entryOf(claim, c.clock()))
}

// Pods implements PodSource.
func (c *ClaimPods) Pods(ctx context.Context, ref ClaimRef) []string {
	c.mu.Lock()
	e := c.entries[ref.UID]
	c.mu.Unlock()
	now := c.clock()
	if e != nil && (e.fixed || now.Sub(e.read) < c.refresh() || c.Client == nil) {
		return e.pods
	}
	if c.Client == nil {
		return nil // never observed, nothing to ask
	}
	c.mu.Lock()
	backoff := c.failed && now.Sub(c.failedAt) < claimReadBackoff
	c.mu.Unlock()
	if backoff {
		if e != nil {
			return e.pods
		}
		return nil
	}
	getCtx, cancel := context.WithTimeout(ctx, claimReadTimeout)
	claim, err := c.Client.ResourceV1().ResourceClaims(ref.Namespace).Get(getCtx, ref.Name, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err) || (err == nil && string(claim.UID) != ref.UID):
		// Deleted (or replaced by a claim of the same name): its pods are
		// gone; the claim is about to be unprepared.
		c.mu.Lock()
		c.store(ref.UID, &podEntry{read: now})
		c.mu.Unlock()
		return nil
	case err != nil:
		c.mu.Lock()
		if !c.failed {
			klog.FromContext(ctx).Error(err, "Reading a claim for its pods failed; its telemetry keeps the pods last known",
				"claim", klog.KRef(ref.Namespace, ref.Name))
		}
		c.failed, c.failedAt = true, now
		c.mu.Unlock()
		if e != nil {
			return e.pods
		}
		return nil
	}
	entry := entryOf(claim, now)
	c.mu.Lock()
	c.failed = false
	c.store(ref.UID, entry)
	c.mu.Unlock()
	return entry.pods
}

// Forget implements PodSource: it drops the claims not in keep (by UID),
// except those observed or read within the refresh period (a claim
// observed at prepare may not have been in the sampler's last look at the
// checkpoint yet).
func (c *ClaimPods) Forget(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	for uid, e := range c.entries {
		if !keep[uid] && now.Sub(e.read) >= c.refresh() {
			delete(c.entries, uid)
		}
	}
}

func (c *ClaimPods) store(uid string, e *podEntry) {
	if c.entries == nil {
		c.entries = map[string]*podEntry{}
	}
	c.entries[uid] = e
}

func (c *ClaimPods) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

func (c *ClaimPods) refresh() time.Duration {
	if c.Refresh > 0 {
		return c.Refresh
	}
	return DefaultPodRefresh
}

// entryOf reads the pods of a claim object: the pods of status.reservedFor,
// sorted. A claim whose controlling owner is a pod (generated from the
// pod's ResourceClaimTemplate) serves that pod alone.
func entryOf(claim *resourceapi.ResourceClaim, now time.Time) *podEntry {
	e := &podEntry{read: now}
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" && r.Name != "" {
			e.pods = append(e.pods, r.Name)
		}
	}
	slices.Sort(e.pods)
	e.pods = slices.Compact(e.pods)
	if o := metav1.GetControllerOf(claim); o != nil && o.APIVersion == "v1" && o.Kind == "Pod" && len(e.pods) > 0 {
		e.fixed = true
	}
	return e
}
