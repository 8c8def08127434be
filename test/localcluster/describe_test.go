package localcluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func TestDescribeDriver(t *testing.T) {
	const ns = "gpudra-system"
	objs := []runtime.Object{
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "plugin", Namespace: ns, Generation: 3},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
				UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1, NumberUnavailable: 1}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ready", Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "plugin"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "plugin", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-ready", Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "n2", Containers: []corev1.Container{{Name: "plugin"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "plugin", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "n2", Containers: []corev1.Container{{Name: "plugin"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending,
				ContainerStatuses: []corev1.ContainerStatus{{Name: "plugin", State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}},
	}
	base := time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)
	for i := 25; i >= 1; i-- { // created out of order: the output sorts them
		objs = append(objs, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e%d", i), Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "not-ready"}, Type: corev1.EventTypeWarning,
			Reason: "Unhealthy", Message: fmt.Sprintf("probe %d", i), Count: 1,
			LastTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second))})
	}
	c := New(Config{Namespace: ns}, io.Discard)
	got := c.describeDriver(context.Background(), fake.NewClientset(objs...))

	for _, want := range []string{
		"daemonset plugin: generation 3 observed 3; desired 2, current 2, updated 1, ready 1, available 1, unavailable 1\n",
		"pod ready on n1: Running [plugin ready=true restarts=0]\n",
		"pod not-ready on n2: Running [plugin ready=false restarts=0]\n  plugin| fake logs\n",
		"pod pending on n2: Pending [plugin waiting: ContainerCreating ]\n",
		"event 15:00:06 Pod/not-ready: Warning Unhealthy: probe 6 (x1)\n",
		"event 15:00:25 Pod/not-ready: Warning Unhealthy: probe 25 (x1)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "probe 5 ") || strings.Contains(got, "ready on n1: Running [plugin ready=true restarts=0]\n  plugin|") {
		t.Errorf("more than the last 20 events, or the log of a ready pod:\n%s", got)
	}
	if i, j := strings.Index(got, "probe 6 "), strings.Index(got, "probe 25 "); i > j {
		t.Errorf("events not in time order:\n%s", got)
	}
}
