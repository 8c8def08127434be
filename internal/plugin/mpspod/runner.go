package mpspod

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// PodRunner runs each MPS control daemon of a claim (one per configuration
// group) as a Pod on this node (a sharing.DaemonRunner). The Pod is named
// after the claim's UID and its group (Name), so a restarted plugin finds it
// again, and owned by the Node.
type PodRunner struct {
	Client kubernetes.Interface
	Config PodConfig
	// Poll is how often a Pod is looked at while waiting (default 250ms).
	Poll time.Duration
	// GoneTimeout bounds the wait for a deleted Pod to be gone (default 60s).
	GoneTimeout time.Duration
}

var _ sharing.DaemonRunner = (*PodRunner)(nil)

func (r *PodRunner) poll() time.Duration {
	if r.Poll > 0 {
		return r.Poll
	}
	return 250 * time.Millisecond
}

func (r *PodRunner) pods() typedPods { return r.Client.CoreV1().Pods(r.Config.Namespace) }

type typedPods = interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
}

// Start implements sharing.DaemonRunner: a Pod of an earlier attempt is
// deleted first, then the claim's Pod is created. exited is closed when
// the Pod has ended or cannot start (its image cannot be pulled, its
// container keeps failing), so that the prepare fails with the reason.
func (r *PodRunner) Start(ctx context.Context, claimUID string, d *sharing.MPSDaemon) (<-chan struct{}, error) {
	if err := r.Stop(ctx, claimUID, d.Group, d.Dir); err != nil {
		return nil, err
	}
	created, err := r.pods().Create(ctx, r.Config.Pod(claimUID, d), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create the MPS control daemon Pod %s/%s: %w", r.Config.Namespace, Name(claimUID, d.Group), err)
	}
	klog.FromContext(ctx).V(3).Info("Created MPS control daemon Pod", "pod", klog.KObj(created), "claimUID", claimUID, "group", d.Group)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = wait.PollUntilContextCancel(ctx, r.poll(), false, func(ctx context.Context) (bool, error) {
			p, err := r.pods().Get(ctx, created.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err == nil && p.UID != created.UID {
				return true, nil
			}
			return err == nil && failed(p) != "", nil
		})
	}()
	return exited, nil
}

// failed says why a Pod will not run its daemon ("" if it may).
func failed(p *corev1.Pod) string {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return "the Pod ended (" + string(p.Status.Phase) + ")"
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return w.Reason + ": " + w.Message
			}
		}
	}
	return ""
}

// Stop implements sharing.DaemonRunner: the Pod is deleted (its process
// sends "quit" to the daemon and waits for it) and Stop waits until it is
// gone. No Pod is not an error.
func (r *PodRunner) Stop(ctx context.Context, claimUID string, group int, _ string) error {
	name := Name(claimUID, group)
	err := r.pods().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete the MPS control daemon Pod %s/%s: %w", r.Config.Namespace, name, err)
	}
	timeout := r.GoneTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	var last *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, r.poll(), timeout, true, func(ctx context.Context) (bool, error) {
		p, err := r.pods().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		last = p
		return false, nil
	})
	if err != nil {
		phase := "unknown"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		return fmt.Errorf("the MPS control daemon Pod %s/%s is not gone %s after its deletion (phase %s; is the kubelet of node %s running?): %w",
			r.Config.Namespace, name, timeout, phase, r.Config.NodeName, err)
	}
	klog.FromContext(ctx).V(3).Info("Deleted MPS control daemon Pod", "pod", klog.KRef(r.Config.Namespace, name), "claimUID", claimUID, "group", group)
	return nil
}

// Abort implements sharing.DaemonRunner.
func (r *PodRunner) Abort(ctx context.Context, claimUID string, d *sharing.MPSDaemon) {
	if err := r.Stop(ctx, claimUID, d.Group, d.Dir); err != nil {
		klog.FromContext(ctx).Error(err, "MPS control daemon Pod of a failed start not removed; removed with the claim's unprepare or at the next start")
	}
}

// Daemons implements sharing.DaemonRunner: the claims and groups of this
// node's Pods.
func (r *PodRunner) Daemons(ctx context.Context) ([]sharing.DaemonRef, error) {
	sel := labels.SelectorFromSet(labels.Set{ComponentLabel: ComponentValue, NodeLabel: r.Config.NodeName})
	list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list MPS control daemon Pods: %w", err)
	}
	var out []sharing.DaemonRef
	for _, p := range list.Items {
		uid := p.Labels[ClaimLabel]
		if uid == "" || p.Spec.NodeName != r.Config.NodeName {
			continue
		}
		group := 0
		if g, ok := p.Labels[GroupLabel]; ok {
			n, err := strconv.Atoi(g)
			if err != nil || n <= 0 || p.Name != Name(uid, n) {
				continue // not one of ours: its name would not be found again
			}
			group = n
		}
		out = append(out, sharing.DaemonRef{ClaimUID: uid, Group: group})
	}
	return out, nil
}

// Describe implements sharing.DaemonRunner: the Pod's phase and the
// state of its container.
func (r *PodRunner) Describe(ctx context.Context, claimUID string, group int, _ string) string {
	name := Name(claimUID, group)
	p, err := r.pods().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("Pod %s/%s: %v", r.Config.Namespace, name, err)
	}
	parts := []string{fmt.Sprintf("Pod %s/%s is %s", p.Namespace, p.Name, p.Status.Phase)}
	if why := failed(p); why != "" {
		parts = append(parts, why)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("container exited %d (%s) %s", t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
		}
		if cs.RestartCount > 0 {
			parts = append(parts, fmt.Sprintf("%d restarts", cs.RestartCount))
		}
	}
	return strings.Join(parts, "; ") + "; see kubectl logs -n " + p.Namespace + " " + p.Name
}
