package localcluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// describeDriver summarizes the driver's namespace for a failed wait: the
// DaemonSets' and Deployments' status, each pod's state (with the log tail
// of those not ready) and the namespace's latest events, so that a failure
// explains itself in a CI log.
func (c *Cluster) describeDriver(ctx context.Context, cs kubernetes.Interface) string {
	ns := c.cfg.Namespace
	var b strings.Builder
	if dss, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ds := range dss.Items {
			s := ds.Status
			fmt.Fprintf(&b, "daemonset %s: generation %d observed %d; desired %d, current %d, updated %d, ready %d, available %d, unavailable %d\n",
				ds.Name, ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.CurrentNumberScheduled,
				s.UpdatedNumberScheduled, s.NumberReady, s.NumberAvailable, s.NumberUnavailable)
		}
	}
	if deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range deps.Items {
			s := d.Status
			fmt.Fprintf(&b, "deployment %s: generation %d observed %d; replicas %d, updated %d, available %d\n",
				d.Name, d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas)
		}
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return b.String() + "cannot list the driver's pods: " + err.Error()
	}
	for _, p := range pods.Items {
		describePod(ctx, cs, &b, &p)
	}
	events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return b.String() + "cannot list the namespace's events: " + err.Error()
	}
	items := events.Items
	sort.Slice(items, func(i, j int) bool { return eventTime(&items[i]).Before(eventTime(&items[j])) })
	if len(items) > 20 {
		items = items[len(items)-20:]
	}
	for _, e := range items {
		fmt.Fprintf(&b, "event %s %s/%s: %s %s (x%d)\n", eventTime(&e).UTC().Format("15:04:05"),
			e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, strings.TrimSpace(e.Reason+": "+e.Message), max(e.Count, 1))
	}
	return b.String()
}

func describePod(ctx context.Context, cs kubernetes.Interface, b *strings.Builder, p *corev1.Pod) {
	fmt.Fprintf(b, "pod %s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
	if p.DeletionTimestamp != nil {
		b.WriteString(" (terminating)")
	}
	for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case st.State.Waiting != nil:
			fmt.Fprintf(b, " [%s waiting: %s %s]", st.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
		case st.State.Terminated != nil:
			fmt.Fprintf(b, " [%s terminated: %s exit %d]", st.Name, st.State.Terminated.Reason, st.State.Terminated.ExitCode)
		default:
			fmt.Fprintf(b, " [%s ready=%v restarts=%d]", st.Name, st.Ready, st.RestartCount)
		}
	}
	b.WriteString("\n")
	if podReady(p) || p.Status.Phase != corev1.PodRunning {
		return
	}
	for _, ctr := range p.Spec.Containers {
		raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, TailLines: ptr.To[int64](15)}).DoRaw(ctx)
		if err != nil {
			fmt.Fprintf(b, "  (no log of %s: %v)\n", ctr.Name, err)
			continue
		}
		for _, line := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
			fmt.Fprintf(b, "  %s| %s\n", ctr.Name, line)
		}
	}
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
