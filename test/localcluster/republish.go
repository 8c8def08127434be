package localcluster

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// A plugin pod that takes over a node's ResourceSlices publishes them as a
// new pool generation (internal/plugin/firstpublish.go), a second or more
// after it is Ready. Until then the scheduler allocates from what the
// replaced pod published, which after a configuration change (MIG mode,
// consumable shares) names devices the new pod does not have. So every
// change that replaces plugin pods waits, per node whose pod was replaced,
// for a pool generation above the one before the change.

// poolState is a node's plugin pod and its pool's generation at one moment.
type poolState struct {
	pod        types.UID // "": no running plugin pod
	generation int64     // 0: no pool
}

// poolStates reads the state of every node's plugin pod and pool of driver.
func (c *Cluster) poolStates(ctx context.Context, cs kubernetes.Interface, driver string) (map[string]poolState, error) {
	pods, err := cs.CoreV1().Pods(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: PluginLabelSelector})
	if err != nil {
		return nil, fmt.Errorf("list plugin pods: %w", err)
	}
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, driver).String()})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices of %s: %w", driver, err)
	}
	out := map[string]poolState{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			s := out[p.Spec.NodeName]
			s.pod = p.UID
			out[p.Spec.NodeName] = s
		}
	}
	for _, sl := range slices.Items {
		s := out[sl.Spec.Pool.Name]
		s.generation = max(s.generation, sl.Spec.Pool.Generation)
		out[sl.Spec.Pool.Name] = s
	}
	return out, nil
}

// republished is nil once every node whose plugin pod differs from the one
// in before, and that had a pool then, publishes a newer pool generation.
func republished(before, now map[string]poolState) error {
	for node, b := range before {
		n := now[node]
		if b.pod == "" || b.generation == 0 || n.pod == "" || n.pod == b.pod {
			continue // no pool to supersede, no plugin now, or the same pod
		}
		if n.generation <= b.generation {
			return fmt.Errorf("node %s: plugin pod replaced, pool still at generation %d (the new pod publishes %d or higher)",
				node, n.generation, b.generation+1)
		}
	}
	return nil
}

// waitRepublished waits until republished(before, now) holds.
func (c *Cluster) waitRepublished(ctx context.Context, cs kubernetes.Interface, driver string, before map[string]poolState, watch []string) error {
	return c.waitFor(ctx, "the replaced plugin pods' pools republished", watch, func(ctx context.Context) error {
		now, err := c.poolStates(ctx, cs, driver)
		if err != nil {
			return err
		}
		return republished(before, now)
	})
}
