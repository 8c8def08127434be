package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Event reasons.
const (
	ReasonPrepareFailed   = "PrepareFailed"
	ReasonDeviceUnhealthy = "DeviceUnhealthy"
	ReasonDeviceHealthy   = "DeviceHealthy"
	ReasonRecoverFailed   = "RecoverFailed"
	// ReasonGPUUnavailable: a GPU NVML counts did not answer at start-up.
	ReasonGPUUnavailable = "GPUUnavailable"
	// ReasonMPSDaemonReplaced: a prepared claim's MPS control daemon
	// stopped answering and was started again.
	ReasonMPSDaemonReplaced = "MPSDaemonReplaced"
	// ReasonMPSDaemonFailed: it stopped answering and could not be.
	ReasonMPSDaemonFailed = "MPSDaemonFailed"
)

// eventSink records events.k8s.io Events on claims and pods: failed
// prepares, and health changes of the GPUs a claim holds.
type eventSink struct {
	client   kubernetes.Interface
	recorder events.EventRecorder
	// prepared says which claims hold a device.
	prepared *prepare.Prepared
	// names select how the lost taint is published (publishedTaints).
	names compat.Names
}

func newEventSink(ctx context.Context, client kubernetes.Interface, o *Options, prepared *prepare.Prepared) *eventSink {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Events are not recorded")
		return nil
	}
	return &eventSink{client: client, prepared: prepared, names: o.names,
		recorder: b.NewRecorder(scheme.Scheme, o.DriverName+"/kubelet-plugin")}
}

// prepareFailed records a Warning on every claim whose prepare failed (the
// kubelet reports the failure on the pod).
func (e *eventSink) prepareFailed(claims []*resourceapi.ResourceClaim, results map[types.UID]kubeletplugin.PrepareResult) {
	if e == nil {
		return
	}
	for _, c := range claims {
		if r, ok := results[c.UID]; ok && r.Err != nil {
			e.recorder.Eventf(c, nil, corev1.EventTypeWarning, ReasonPrepareFailed, "Prepare", "%s", truncateNote(r.Err.Error()))
		}
	}
}

// recoverFailed records a Warning on every claim that the start-up recovery
// could not settle (it stays prepared until the kubelet unprepares it).
// Failures of a GPU or of a leftover without a record are only logged.
func (e *eventSink) recoverFailed(failures []prepare.RecoverFailure) {
	if e == nil {
		return
	}
	for _, f := range failures {
		ns, name, ok := strings.Cut(f.Claim, "/")
		if !ok {
			continue
		}
		claimRef := &corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim",
			Namespace: ns, Name: name, UID: types.UID(f.ClaimUID)}
		e.recorder.Eventf(claimRef, nil, corev1.EventTypeWarning, ReasonRecoverFailed, "Recover", "%s", truncateNote(f.Err.Error()))
	}
}

// mpsDaemon records a Warning on a claim whose MPS control daemon stopped
// answering, and on the pods using it: it was started again, and CUDA
// processes connected to the old one must be restarted (or it could not
// be). It does not block: the pods are looked up in the background.
func (e *eventSink) mpsDaemon(ev prepare.MPSDaemonEvent) {
	if e == nil {
		return
	}
	ns, name, ok := strings.Cut(ev.Claim, "/")
	if !ok {
		return
	}
	reason := ReasonMPSDaemonReplaced
	note := "The MPS control daemon of this claim stopped answering (" + ev.Reason + "; the plugin container that ran it was " +
		"restarted or replaced) and has been started again with the claim's settings. CUDA processes that were connected " +
		"to the old daemon lost their MPS server and must be restarted (restart the claim's pods); new processes reach the new daemon."
	if ev.Err != nil {
		reason = ReasonMPSDaemonFailed
		note = "The MPS control daemon of this claim stopped answering (" + ev.Reason + ") and could not be started again: " +
			ev.Err.Error() + ". MPS clients of this claim cannot run; retried every --mps-check-interval."
	}
	claimRef := &corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim",
		Namespace: ns, Name: name, UID: types.UID(ev.ClaimUID)}
	e.recorder.Eventf(claimRef, nil, corev1.EventTypeWarning, reason, "MPSDaemon", "%s", truncateNote(note))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, pod := range e.podsOf(ctx, ns, name, ev.ClaimUID) {
			e.recorder.Eventf(pod, claimRef, corev1.EventTypeWarning, reason, "MPSDaemon", "%s", truncateNote(note))
		}
	}()
}

// healthChanged records an event on the claims holding a device whose GPU
// changed health between prev and cur, and on the pods using them.
func (e *eventSink) healthChanged(ctx context.Context, prev, cur health.Snapshot, devices map[string]resourceapi.Device) {
	if e == nil {
		return
	}
	for name, d := range devices {
		gpu := health.GPUOf(d)
		before, now := prev.DeviceHealth(d), cur.DeviceHealth(d)
		if before == now {
			continue
		}
		holders, err := e.prepared.Holding(name)
		if err != nil || len(holders) == 0 {
			continue
		}
		kind, reason := corev1.EventTypeWarning, ReasonDeviceUnhealthy
		note := "device " + name + " (" + gpu + ") is " + string(now) + ": " + cur.DeviceMessage(d)
		if now == health.Healthy {
			kind, reason = corev1.EventTypeNormal, ReasonDeviceHealthy
			note = "device " + name + " (" + gpu + ") is Healthy again"
		}
		for _, h := range holders {
			claimRef := &corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim",
				Namespace: h.Namespace, Name: h.Name, UID: types.UID(h.UID)}
			e.recorder.Eventf(claimRef, nil, kind, reason, "HealthCheck", "%s", truncateNote(note))
			for _, pod := range e.podsOf(ctx, h.Namespace, h.Name, h.UID) {
				e.recorder.Eventf(pod, claimRef, kind, reason, "HealthCheck", "%s", truncateNote(note+" (claim "+h.String()+")"))
			}
		}
	}
}

// unavailableGPUs records a Warning on the node for every GPU that did not
// answer NVML at start-up, saying whether it is published (tainted, from
// its last known identity) or withheld.
func (e *eventSink) unavailableGPUs(nodeName string, gpus []model.UnavailableGPU) {
	if e == nil {
		return
	}
	// The kubelet names its node in events with the node name as UID.
	node := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
	for _, u := range gpus {
		note := fmt.Sprintf("GPU at NVML index %d does not answer NVML (%s); ", u.Index, u.Error)
		if u.PublishedAs != "" {
			t := resourceapi.DeviceTaint{Key: health.KeyLost, Value: u.Reason, Effect: resourceapi.DeviceTaintEffectNoExecute}
			if e.names.Driver != "" {
				t = publishedTaints(e.names, []resourceapi.DeviceTaint{t})[0]
			}
			taint := t.Key
			if t.Value != "" {
				taint += "=" + t.Value
			}
			note += fmt.Sprintf("published as %s (%s) from its last known identity with taint %s:%s until it answers again",
				u.PublishedAs, u.UUID, taint, t.Effect)
		} else {
			note += "not published: " + u.Withheld
		}
		e.recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonGPUUnavailable, "Discover", "%s", truncateNote(note))
	}
}

// podsOf lists the pods a claim is reserved for.
func (e *eventSink) podsOf(ctx context.Context, ns, name, uid string) []*corev1.ObjectReference {
	c, err := e.client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || string(c.UID) != uid {
		return nil
	}
	var out []*corev1.ObjectReference
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			out = append(out, &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: r.Name, UID: r.UID})
		}
	}
	return out
}

// truncateNote keeps an event note within the API's 1 kB limit.
func truncateNote(s string) string {
	const max = 1000
	if len(s) <= max {
		return s
	}
	return s[:max-3] + "..."
}
