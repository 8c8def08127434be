package computedomain

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// CliqueAttribute is the device attribute under which the channel
// driver's kubelet plugin publishes the node's NVLink clique on its channel
// and daemon devices (the GPU plugin publishes each GPU's under the same
// name).
const CliqueAttribute = "cliqueID"

// syncStatus computes the domain's status from its daemons' pods and
// writes it when it differs from the stored one. It runs from its own queue,
// StatusDelay after the first event that asked for it: the events of a
// burst find the key already queued, so one write covers them all.
func (c *Controller) syncStatus(ctx context.Context, k key) error {
	cd, err := c.domain(k)
	if err != nil || cd == nil || cd.DeletionTimestamp != nil {
		return err
	}
	pods, err := c.pods.GetIndexer().ByIndex(refIndex, k.String())
	if err != nil {
		return fmt.Errorf("look up the daemon pods: %w", err)
	}
	status := computeStatus(cd, pods, c.cliqueOf)
	if reflect.DeepEqual(status, cd.Status) {
		c.cfg.Metrics.statusUnchanged()
		return nil
	}
	// A merge patch of the status subresource without a resourceVersion:
	// the controller is the status' only writer, so there is nothing to
	// conflict with, and a stale informer copy costs at most one more write.
	patch, err := json.Marshal(map[string]any{"status": statusPatch{Status: status.Status, Nodes: status.Nodes}})
	if err != nil {
		return fmt.Errorf("encode the status: %w", err)
	}
	_, err = c.cfg.Dynamic.Resource(c.gvrs[k.Group]).Namespace(k.Namespace).Patch(ctx, k.Name, types.MergePatchType, patch,
		metav1.PatchOptions{}, "status")
	if err := c.cfg.Metrics.observeWrite("status", err); err != nil {
		return fmt.Errorf("write the status: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Wrote the ComputeDomain status", "status", status.Status, "nodes", len(status.Nodes))
	return nil
}

// statusPatch sends nodes as null when there are none, so that a merge
// patch removes the nodes that left.
type statusPatch struct {
	Status v1alpha1.ComputeDomainState  `json:"status"`
	Nodes  []v1alpha1.ComputeDomainNode `json:"nodes"`
}

// cliqueOf returns the clique ID the channel driver's ResourceSlices publish
// for node: the first device's cliqueID attribute, "" when none has one.
// It is the clique the node side serves the domain's daemon with (its
// nodes.cfg lists the domain's nodes of this clique), which waits for the
// NVLink fabric registration to complete; the GPU plugin's attribute is
// read once when it starts.
func (c *Controller) cliqueOf(node string) string {
	attr := resourceapi.QualifiedName(CliqueAttribute)
	objs, _ := c.slices.GetIndexer().ByIndex(nodeIndex, node)
	for _, obj := range objs {
		s, ok := obj.(*resourceapi.ResourceSlice)
		if !ok || s.Spec.Driver != c.cd.Driver {
			continue
		}
		for _, d := range s.Spec.Devices {
			if v, ok := d.Attributes[attr]; ok && v.StringValue != nil && *v.StringValue != "" {
				return *v.StringValue
			}
		}
	}
	return ""
}

// computeStatus derives a domain's status. A node joins when its daemon pod
// runs there with an address; it is Ready while the pod is. Nodes keep
// their index within their clique for as long as they stay; a new node gets
// the lowest free index of its clique. The domain is Ready when at least one
// node (and at least numNodes) joined and every node is Ready.
func computeStatus(cd *v1alpha1.ComputeDomain, pods []any, cliqueOf func(string) string) v1alpha1.ComputeDomainStatus {
	prev := map[string]v1alpha1.ComputeDomainNode{}
	for _, n := range cd.Status.Nodes {
		prev[n.Name] = n
	}
	byName := map[string]v1alpha1.ComputeDomainNode{}
	for _, obj := range pods {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Labels == nil {
			continue
		}
		addr, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil {
			continue
		}
		n := v1alpha1.ComputeDomainNode{Name: pod.Spec.NodeName, IPAddress: addr.String(), CliqueID: cliqueOf(pod.Spec.NodeName),
			Index: -1, Status: v1alpha1.DomainNotReady}
		if podReady(pod) {
			n.Status = v1alpha1.DomainReady
		}
		if old, ok := byName[n.Name]; ok && old.Status == v1alpha1.DomainReady {
			continue // two pods on one node (a rollout): the ready one counts
		}
		byName[n.Name] = n
	}
	nodes := make([]v1alpha1.ComputeDomainNode, 0, len(byName))
	used := map[string]map[int32]bool{}
	for name, n := range byName {
		if p, ok := prev[name]; ok && p.CliqueID == n.CliqueID && p.Index >= 0 && !used[n.CliqueID][p.Index] {
			n.Index = p.Index
			if used[n.CliqueID] == nil {
				used[n.CliqueID] = map[int32]bool{}
			}
			used[n.CliqueID][n.Index] = true
		}
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b v1alpha1.ComputeDomainNode) int { return strings.Compare(a.Name, b.Name) })
	ready := len(nodes) > 0 && len(nodes) >= int(cd.Spec.NumNodes)
	for i := range nodes {
		n := &nodes[i]
		if n.Index < 0 {
			if used[n.CliqueID] == nil {
				used[n.CliqueID] = map[int32]bool{}
			}
			for n.Index = 0; used[n.CliqueID][n.Index]; n.Index++ {
			}
			used[n.CliqueID][n.Index] = true
		}
		ready = ready && n.Status == v1alpha1.DomainReady
	}
	status := v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainNotReady}
	if ready {
		status.Status = v1alpha1.DomainReady
	}
	if len(nodes) > 0 {
		status.Nodes = nodes
	}
	return status
}

func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
