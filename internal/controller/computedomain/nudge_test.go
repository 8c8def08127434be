package computedomain

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// pendingDaemonPod is a daemon pod of the domain with UID uid, made by its
// DaemonSet, bound to node at scheduled, whose sandbox the kubelet has not
// created (PodReadyToStartContainers False).
func pendingDaemonPod(names compat.Names, uid, node string, scheduled time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: daemonName(uid) + "-" + node, Namespace: driverNS, UID: types.UID("pod-" + node),
			CreationTimestamp: metav1.NewTime(scheduled.Add(-time.Second)),
			Labels:            map[string]string{names.ComputeDomain().Label: uid},
			Annotations:       map[string]string{RefAnnotation: "resource.gpudra.io/team-a/train"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: daemonName(uid),
				UID: "ds-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(scheduled)},
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse}}},
	}
}

// podPatches records the patches of pods: pod name -> patch bodies.
type podPatches struct {
	mu      sync.Mutex
	patches map[string][]string
}

func recordPodPatches(t *testing.T, e *env) *podPatches {
	t.Helper()
	p := &podPatches{patches: map[string][]string{}}
	e.kube.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		pa := a.(clienttesting.PatchAction)
		assert.Equal(t, types.MergePatchType, pa.GetPatchType())
		assert.Empty(t, pa.GetSubresource())
		p.mu.Lock()
		p.patches[pa.GetName()] = append(p.patches[pa.GetName()], string(pa.GetPatch()))
		p.mu.Unlock()
		return false, nil, nil
	})
	return p
}

func (p *podPatches) of(name string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.patches[name]...)
}

func nudgePatch(n string) string {
	return `{"metadata":{"annotations":{"` + NudgeAnnotation + `":"` + n + `"}}}`
}

// TestNudgeDaemonPods runs the controller with a fake clock on a bound
// daemon pod whose sandbox is not created (the control, nudged in every
// case but "off") and a subject pod: the control is nudged 5, 15, 35 and 75
// seconds after its scheduling and never again; the subject as the case
// says.
func TestNudgeDaemonPods(t *testing.T) {
	names := compat.Default()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	subject := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := pendingDaemonPod(names, "uid-1", "b", t0)
		mutate(p)
		return p
	}
	cases := []struct {
		name  string
		after time.Duration
		pod   *corev1.Pod
		// becomeReady: the subject's sandbox is created after its first
		// nudge.
		becomeReady bool
		want        []string // the subject's patches
	}{
		{name: "bound, not ready to start: nudged on schedule, 4 times", after: 5 * time.Second,
			pod: subject(func(*corev1.Pod) {}), want: []string{nudgePatch("1"), nudgePatch("2"), nudgePatch("3"), nudgePatch("4")}},
		{name: "no PodReadyToStartContainers condition yet, no PodScheduled time: from creation", after: 5 * time.Second,
			pod: subject(func(p *corev1.Pod) {
				p.Status.Conditions = nil
				p.CreationTimestamp = metav1.NewTime(t0)
			}), want: []string{nudgePatch("1"), nudgePatch("2"), nudgePatch("3"), nudgePatch("4")}},
		{name: "ready after the first nudge: never again", after: 5 * time.Second, pod: subject(func(*corev1.Pod) {}),
			becomeReady: true, want: []string{nudgePatch("1")}},
		{name: "a nudge of a previous leader is continued", after: 5 * time.Second,
			pod:  subject(func(p *corev1.Pod) { p.Annotations[NudgeAnnotation] = "2" }),
			want: []string{nudgePatch("3"), nudgePatch("4")}},
		{name: "ready to start", after: 5 * time.Second, pod: subject(func(p *corev1.Pod) {
			p.Status.Conditions[1].Status = corev1.ConditionTrue
		})},
		{name: "running", after: 5 * time.Second, pod: subject(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = p.Status.Conditions[:1]
		})},
		{name: "not bound", after: 5 * time.Second, pod: subject(func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status.Conditions = nil
		})},
		{name: "being deleted", after: 5 * time.Second, pod: subject(func(p *corev1.Pod) {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			p.Finalizers = []string{"example.com/keep"}
		})},
		{name: "not made by the domain's DaemonSet", after: 5 * time.Second, pod: subject(func(p *corev1.Pod) {
			p.OwnerReferences[0].Name = "gpudra-kubelet-plugin"
		})},
		{name: "without the domain reference", after: 5 * time.Second, pod: subject(func(p *corev1.Pod) {
			delete(p.Annotations, RefAnnotation)
		})},
		{name: "off", pod: subject(func(*corev1.Pod) {})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			control := pendingDaemonPod(names, "uid-1", "a", t0)
			e := newEnv(t, names, []schema.GroupVersionResource{nativeGVR}, []runtime.Object{control, tc.pod})
			e.cfg.DaemonPodNudgeAfter, e.cfg.Clock = tc.after, clk
			patches := recordPodPatches(t, e)
			e.run(t)
			ctx := context.Background()

			// Time moves on only here, so the controller sees each step
			// whenever it gets to the pods: no nudge is early.
			var wantControl []string
			for i, at := range []time.Duration{5, 15, 35, 75} {
				clk.SetTime(t0.Add(at*time.Second - time.Millisecond))
				time.Sleep(50 * time.Millisecond)
				assert.Len(t, patches.of(control.Name), len(wantControl), "no nudge before %s", at*time.Second)
				clk.SetTime(t0.Add(at * time.Second))
				if tc.after == 0 {
					continue
				}
				wantControl = append(wantControl, nudgePatch(string(rune('1'+i))))
				require.Eventually(t, func() bool { return len(patches.of(control.Name)) == len(wantControl) }, waitFor, tick,
					"nudge %d of the control pod at %s", i+1, at*time.Second)
				if i == 0 && tc.becomeReady {
					require.Eventually(t, func() bool { return len(patches.of(tc.pod.Name)) == 1 }, waitFor, tick)
					p, err := e.kube.CoreV1().Pods(driverNS).Get(ctx, tc.pod.Name, metav1.GetOptions{})
					require.NoError(t, err)
					p.Status.Conditions[1].Status = corev1.ConditionTrue
					_, err = e.kube.CoreV1().Pods(driverNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
					require.NoError(t, err)
				}
			}
			for _, at := range []time.Duration{155, 1000, 10000} {
				clk.SetTime(t0.Add(at * time.Second))
				time.Sleep(100 * time.Millisecond)
			}
			assert.Equal(t, wantControl, patches.of(control.Name), "the control pod's nudges")
			assert.Equal(t, tc.want, patches.of(tc.pod.Name), "the subject pod's nudges")

			p, err := e.kube.CoreV1().Pods(driverNS).Get(ctx, control.Name, metav1.GetOptions{})
			require.NoError(t, err)
			if tc.after > 0 {
				assert.Equal(t, "4", p.Annotations[NudgeAnnotation])
			}
			assert.Equal(t, control.Labels, p.Labels, "a nudge changes nothing but its annotation")
			assert.Equal(t, control.Spec, p.Spec, "a nudge changes nothing but its annotation")
			assert.Equal(t, float64(len(wantControl)+len(tc.want)), e.counter(t, MetricWrites, map[string]string{
				"object": "nudge", "result": "success"}))
			byAttempt := map[string]float64{}
			for _, patch := range append(wantControl, tc.want...) {
				for _, n := range []string{"1", "2", "3", "4"} {
					if patch == nudgePatch(n) {
						byAttempt[n]++
					}
				}
			}
			for _, n := range []string{"1", "2", "3", "4"} {
				assert.Equal(t, byAttempt[n], e.counter(t, MetricNudges, map[string]string{"attempt": n}), "nudges of attempt %s", n)
			}
		})
	}
}

// TestNextNudge: when each nudge is due, from the pod's scheduling and the
// previous nudge (a new leader that comes late spaces its nudges as well).
func TestNextNudge(t *testing.T) {
	names := compat.Default()
	c := &Controller{cfg: Config{Names: names, Namespace: driverNS, DaemonPodNudgeAfter: 5 * time.Second}, cd: names.ComputeDomain()}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := pendingDaemonPod(names, "uid-1", "a", t0)
	annotated := pod.DeepCopy()
	annotated.Annotations[NudgeAnnotation] = "3"
	done := pod.DeepCopy()
	done.Annotations[NudgeAnnotation] = "4"
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		st     nudgeState
		wantN  int
		wantAt time.Duration // after t0
		wantOK bool
	}{
		{"first", pod, nudgeState{}, 1, 5 * time.Second, true},
		{"second", pod, nudgeState{count: 1, last: t0.Add(5 * time.Second)}, 2, 15 * time.Second, true},
		{"fourth", pod, nudgeState{count: 3, last: t0.Add(35 * time.Second)}, 4, 75 * time.Second, true},
		{"second, the first was late", pod, nudgeState{count: 1, last: t0.Add(10 * time.Minute)}, 2, 10*time.Minute + 10*time.Second, true},
		{"the annotation counts", annotated, nudgeState{}, 4, 75 * time.Second, true},
		{"the memory counts (the informer lags)", annotated, nudgeState{count: 4}, 0, 0, false},
		{"no fifth", done, nudgeState{}, 0, 0, false},
		{"seen ready to start once", pod, nudgeState{started: true}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, due, ok := c.nextNudge(tc.pod, tc.st)
			assert.Equal(t, tc.wantOK, ok)
			assert.Equal(t, tc.wantN, n)
			if ok {
				assert.Equal(t, t0.Add(tc.wantAt), due)
			}
		})
	}
}
