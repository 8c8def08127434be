package computedomain

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// NudgeAnnotation is the annotation the controller writes on one of its IMEX
// daemon pods whose sandbox the kubelet has not created some time after the
// pod was scheduled: its value is the number of nudges so far ("1" ... "4").
// Any change of a pod's annotations makes its kubelet sync the pod at once,
// and so retry the pod's DRA prepare, which the kubelet otherwise retries
// only at its periodic resync, 60 to 90 seconds later: it does not count a
// failed prepare as a failed sync (kubernetes#139836). The chart's
// admission policy lets the controller change nothing else on a pod.
const NudgeAnnotation = "gpudra.io/computedomain-kubelet-nudge"

// MaxNudges is the number of nudges a daemon pod gets at most; after them
// the kubelet's own resync takes over.
const MaxNudges = 4

// nudgeState is what the controller remembers of the nudges of one pod
// (by namespace/name; a new pod of the name, by UID, starts afresh). The
// count is also in the pod's annotation, so that a new leader continues
// it; the memory covers an informer that has not yet seen the last patch.
type nudgeState struct {
	uid     types.UID
	count   int       // nudges written
	last    time.Time // when the last one was written
	started bool      // seen ready to start: never nudged again
}

// nudges is the kubelet nudge of the controller's IMEX daemon pods: a
// delaying queue of pod keys (namespace/name) and the nudges written.
type nudges struct {
	queue workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	state map[string]nudgeState
}

func newNudges(cfg Config) *nudges {
	if cfg.DaemonPodNudgeAfter <= 0 {
		return nil
	}
	return &nudges{state: map[string]nudgeState{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gpudra-computedomain-nudge", Clock: cfg.Clock})}
}

// isDaemonPod reports whether pod is an IMEX daemon pod of the controller's
// making: in the driver's namespace, labelled with a domain's UID and
// annotated with its reference (as the status reads them), and controlled
// by that domain's DaemonSet.
func (c *Controller) isDaemonPod(pod *corev1.Pod) bool {
	uid := pod.Labels[c.cd.Label]
	if uid == "" || pod.Annotations[RefAnnotation] == "" || pod.Namespace != c.cfg.Namespace {
		return false
	}
	owner := metav1.GetControllerOfNoCopy(pod)
	return owner != nil && owner.APIVersion == "apps/v1" && owner.Kind == "DaemonSet" && owner.Name == daemonName(uid)
}

// readyToStart reports whether the kubelet created the pod's sandbox, which
// it does only once the pod's DRA prepare succeeded: the
// PodReadyToStartContainers condition is True, or the pod is past Pending.
func readyToStart(pod *corev1.Pod) bool {
	if pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// scheduledAt is when the pod was bound to its node: the PodScheduled
// condition's transition, else its creation.
func scheduledAt(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return pod.CreationTimestamp.Time
}

// nextNudge returns the nudge pod is due for (1 ... MaxNudges) and when,
// given what was written before; ok is false when it gets none (any more).
// Nudge n is due after*(2^n - 1) after the pod was scheduled (5, 15, 35
// and 75 seconds with 5s), and at least after*2^(n-1) after the previous
// one, should the controller have come late (a new leader).
func (c *Controller) nextNudge(pod *corev1.Pod, st nudgeState) (n int, due time.Time, ok bool) {
	after := c.cfg.DaemonPodNudgeAfter
	if after <= 0 || st.started || !c.isDaemonPod(pod) || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil ||
		readyToStart(pod) {
		return 0, time.Time{}, false
	}
	done := st.count
	if v, err := strconv.Atoi(pod.Annotations[NudgeAnnotation]); err == nil && v > done {
		done = v
	}
	if done >= MaxNudges {
		return 0, time.Time{}, false
	}
	n = done + 1
	due = scheduledAt(pod).Add(after * time.Duration(1<<n-1))
	if !st.last.IsZero() {
		if d := st.last.Add(after * time.Duration(1<<(n-1))); d.After(due) {
			due = d
		}
	}
	return n, due, true
}

// nudgeBody is the merge patch of nudge n: NudgeAnnotation and nothing
// else (the chart's admission policy admits nothing else).
func nudgeBody(n int) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{NudgeAnnotation: strconv.Itoa(n)}}})
}

// onPodEvent handles an event of a pod of the driver's namespace: its
// domain's status is synced, and a daemon pod is checked for a nudge.
func (c *Controller) onPodEvent(obj any) {
	c.onPod(obj)
	if c.nudges == nil {
		return
	}
	if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.nudges.queue.Add(k)
	}
}

// drainNudges processes the nudge queue until it shuts down. A failed
// patch is retried with the queue's backoff, five times at most.
func (c *Controller) drainNudges(ctx context.Context) {
	q := c.nudges.queue
	for {
		k, quit := q.Get()
		if quit {
			return
		}
		err := c.syncNudge(ctx, k)
		switch {
		case err == nil:
			q.Forget(k)
		case q.NumRequeues(k) < 5:
			klog.FromContext(ctx).Error(err, "Cannot nudge the kubelet of an IMEX daemon pod; retrying", "pod", k,
				"attempts", q.NumRequeues(k)+1)
			q.AddRateLimited(k)
		default:
			klog.FromContext(ctx).Error(err, "Cannot nudge the kubelet of an IMEX daemon pod; giving up until the pod changes", "pod", k)
			q.Forget(k)
		}
		q.Done(k)
	}
}

// syncNudge nudges the pod of key k when it is due, or queues it for when
// it will be.
func (c *Controller) syncNudge(ctx context.Context, k string) error {
	obj, exists, err := c.pods.GetIndexer().GetByKey(k)
	if err != nil {
		return fmt.Errorf("look up pod %s: %w", k, err)
	}
	pod, _ := obj.(*corev1.Pod)
	c.nudges.mu.Lock()
	if !exists || pod == nil || !c.isDaemonPod(pod) {
		// Gone, or not a daemon pod (the informer has every pod of the
		// namespace): nothing to remember.
		delete(c.nudges.state, k)
		c.nudges.mu.Unlock()
		return nil
	}
	st := c.nudges.state[k]
	if st.uid != pod.UID {
		st = nudgeState{uid: pod.UID}
	}
	st.started = st.started || readyToStart(pod)
	c.nudges.state[k] = st
	c.nudges.mu.Unlock()

	n, due, ok := c.nextNudge(pod, st)
	if !ok {
		return nil
	}
	now := c.cfg.Clock.Now()
	if wait := due.Sub(now); wait > 0 {
		c.nudges.queue.AddAfter(k, wait)
		return nil
	}
	patch, err := nudgeBody(n)
	if err != nil {
		return fmt.Errorf("encode the nudge of pod %s: %w", k, err)
	}
	_, err = c.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err := c.cfg.Metrics.observeWrite("nudge", err); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile; the informer's event cleans up
		}
		return fmt.Errorf("annotate pod %s with %s=%d: %w", k, NudgeAnnotation, n, err)
	}
	c.cfg.Metrics.nudged(n)
	c.nudges.mu.Lock()
	if cur := c.nudges.state[k]; cur.uid == pod.UID {
		cur.count, cur.last = n, now
		c.nudges.state[k] = cur
	}
	c.nudges.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Nudged the kubelet to sync an IMEX daemon pod whose sandbox it has not created: "+
		"the kubelet retries a failed DRA prepare only at its periodic resync (kubernetes#139836)",
		"pod", klog.KObj(pod), "node", pod.Spec.NodeName, "attempt", n, "maxAttempts", MaxNudges,
		"sinceScheduled", now.Sub(scheduledAt(pod)).Round(time.Millisecond))
	if n < MaxNudges {
		// Due again after*2^n from now; an event of the pod may check it
		// sooner, which then waits as well.
		c.nudges.queue.AddAfter(k, c.cfg.DaemonPodNudgeAfter*time.Duration(1<<n))
	}
	return nil
}
