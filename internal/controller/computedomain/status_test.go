package computedomain

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

func TestComputeStatus(t *testing.T) {
	names := compat.Default()
	pod := func(node, ip string, ready bool) any { return daemonPod(names, "ref", "uid", node, ip, ready) }
	node := func(name, ip, clique string, index int32, ready bool) v1alpha1.ComputeDomainNode {
		s := v1alpha1.DomainNotReady
		if ready {
			s = v1alpha1.DomainReady
		}
		return v1alpha1.ComputeDomainNode{Name: name, IPAddress: ip, CliqueID: clique, Index: index, Status: s}
	}
	cliques := map[string]string{"a": "c1", "b": "c1", "c": "c2", "d": "c1"}
	terminating := daemonPod(names, "ref", "uid", "d", "10.0.0.4", true)
	terminating.DeletionTimestamp = &metav1.Time{}
	failed := daemonPod(names, "ref", "uid", "d", "10.0.0.4", false)
	failed.Status.Phase = corev1.PodFailed
	cases := []struct {
		name     string
		numNodes int32
		prev     []v1alpha1.ComputeDomainNode
		pods     []any
		want     v1alpha1.ComputeDomainStatus
	}{
		{name: "no daemon yet", want: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainNotReady}},
		{name: "all ready, numNodes open", pods: []any{pod("b", "10.0.0.2", true), pod("a", "10.0.0.1", true)},
			want: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainReady,
				Nodes: []v1alpha1.ComputeDomainNode{node("a", "10.0.0.1", "c1", 0, true), node("b", "10.0.0.2", "c1", 1, true)}}},
		{name: "fewer nodes than numNodes", numNodes: 3, pods: []any{pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", true)},
			want: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainNotReady,
				Nodes: []v1alpha1.ComputeDomainNode{node("a", "10.0.0.1", "c1", 0, true), node("b", "10.0.0.2", "c1", 1, true)}}},
		{name: "one daemon not ready", numNodes: 2, pods: []any{pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", false)},
			want: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainNotReady,
				Nodes: []v1alpha1.ComputeDomainNode{node("a", "10.0.0.1", "c1", 0, true), node("b", "10.0.0.2", "c1", 1, false)}}},
		{name: "pod without address, terminating or failed does not join",
			pods: []any{pod("a", "10.0.0.1", true), pod("b", "", false), terminating, failed},
			want: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainReady,
				Nodes: []v1alpha1.ComputeDomainNode{node("a", "10.0.0.1", "c1", 0, true)}}},
		{name: "indices kept, a newcomer takes the lowest free one, per clique",
			prev: []v1alpha1.ComputeDomainNode{node("b", "10.0.0.2", "c1", 0, true), node("d", "10.0.0.4", "c1", 2, true)},
			pods: []any{pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", true), pod("c", "10.0.0.3", true), pod("d", "10.0.0.4", true)},
			want: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainReady, Nodes: []v1alpha1.ComputeDomainNode{
				node("a", "10.0.0.1", "c1", 1, true), node("b", "10.0.0.2", "c1", 0, true),
				node("c", "10.0.0.3", "c2", 0, true), node("d", "10.0.0.4", "c1", 2, true)}}},
		{name: "IPv6 written in canonical form", pods: []any{pod("a", "fd00:0:0::1", true)},
			want: v1alpha1.ComputeDomainStatus{Status: v1alpha1.DomainReady,
				Nodes: []v1alpha1.ComputeDomainNode{node("a", "fd00::1", "c1", 0, true)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cd := &v1alpha1.ComputeDomain{Spec: v1alpha1.ComputeDomainSpec{NumNodes: tc.numNodes},
				Status: v1alpha1.ComputeDomainStatus{Nodes: tc.prev}}
			got := computeStatus(cd, tc.pods, func(n string) string { return cliques[n] })
			assert.Equal(t, tc.want, got)
			assert.Empty(t, v1alpha1.ValidateComputeDomainStatus(&got, field.NewPath("status")), "the status must pass the API's validation")
		})
	}
}
