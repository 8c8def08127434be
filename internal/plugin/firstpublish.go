package plugin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// publishFirst creates the node's ResourceSlices directly when the node has
// none of this driver, so that a new node's GPUs become allocatable without
// waiting for the helper's ResourceSlice controller. It returns the pool
// generation the controller is to publish: 1 for the slices it created;
// one above the highest generation found when the node already has slices
// (an earlier instance published them), so that the controller rewrites
// them as a new generation; 0 (the controller's own choice) on an error.
//
// The resourceslice controller stays the slices' only owner: it adopts
// these (same content, names and pool generation) and writes nothing.
// Design and measurements: docs/design/first-publish.md.
func publishFirst(ctx context.Context, client kubernetes.Interface, driverName, nodeName string, resources resourceslice.DriverResources) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	existing, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		resourceapi.ResourceSliceSelectorDriver:   driverName,
		resourceapi.ResourceSliceSelectorNodeName: nodeName,
	}.String()})
	if err != nil {
		return 0, fmt.Errorf("list ResourceSlices of node %s: %w", nodeName, err)
	}
	if len(existing.Items) > 0 {
		var highest int64
		for _, s := range existing.Items {
			highest = max(highest, s.Spec.Pool.Generation)
		}
		return highest + 1, nil
	}
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("get node %s (owner of its ResourceSlices): %w", nodeName, err)
	}
	logger := klog.FromContext(ctx)
	for _, s := range firstSlices(driverName, node.Name, node.UID, resources) {
		created, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return 0, fmt.Errorf("create ResourceSlice for pool %s: %w", s.Spec.Pool.Name, err)
		}
		logger.V(3).Info("Published first ResourceSlice", "slice", klog.KObj(created), "devices", len(created.Spec.Devices))
	}
	return 1, nil
}

// firstSlices are the slices the resourceslice controller would create for
// resources on an empty node: slice.Objects with the controller's names,
// owner and first pool generation (1).
func firstSlices(driverName, nodeName string, nodeUID types.UID, resources resourceslice.DriverResources) []*resourceapi.ResourceSlice {
	objs := slice.Objects(driverName, nodeName, resources)
	out := make([]*resourceapi.ResourceSlice, 0, len(objs))
	index := map[string]int{} // next slice index per pool
	for i := range objs {
		s := &objs[i]
		pool := s.Spec.Pool.Name
		// The controller's name scheme: the slice's index in its pool in hex,
		// at least 5 digits, then driver and owner, separated by "-".
		width := max(5, len(strconv.FormatInt(s.Spec.Pool.ResourceSliceCount-1, 16)))
		s.ObjectMeta = metav1.ObjectMeta{
			GenerateName: fmt.Sprintf("%0*x-%s-%s-", width, index[pool], driverName, nodeName),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: nodeUID,
				Controller: ptr.To(true)}},
		}
		index[pool]++
		s.Spec.Pool.Generation = max(s.Spec.Pool.Generation, 1)
		out = append(out, s)
	}
	return out
}

// Desired is what the publisher would publish now: the base devices with
// the current health taints under their published keys (for publishFirst).
func (p *publisher) Desired() resourceslice.DriverResources {
	p.mu.Lock()
	defer p.mu.Unlock()
	return publishedTaintKeys(p.names, p.desiredLocked())
}
