package slice

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ShareStep is the granularity of consumable memory shares: claims ask for
// whole GiB (capacity.requests.memory), rounded up to the next step by the
// scheduler, and a share of at least one step.
var ShareStep = resource.MustParse("1Gi")

// WithConsumableMemory turns whole GPUs into consumable-capacity devices
// (KEP-5075, DRAConsumableCapacity, beta and on by default since 1.36): each
// device may be allocated to several claims at once
// (allowMultipleAllocations) as long as the memory they request fits its
// memory capacity. The request policy:
//
//   - a claim that asks for no memory consumes all of it (rounded down to a
//     whole step), so it never shares the GPU by accident;
//   - requests are whole GiB from 1Gi up to the GPU's memory.
//
// Each allocation carries a ShareID and its consumedCapacity; the kubelet
// plugin enforces the share (an MPS pinned-memory limit, internal/plugin/sharing).
//
// Only whole GPUs outside dynamic MIG are shared: MIG devices are left as
// they are, and a partitionable GPU consumes all its counters with every
// allocation, so a second share could never be allocated (the plugin
// refuses --gpu-sharing=consumable with --mig=dynamic for that reason).
func WithConsumableMemory(devices []resourceapi.Device) error {
	for i := range devices {
		d := &devices[i]
		if t := d.Attributes[AttrType].StringValue; t == nil || *t != DeviceTypeGPU || len(d.ConsumesCounters) > 0 {
			continue
		}
		mem, ok := d.Capacity[CapacityMemory]
		if !ok {
			continue // a unified-memory GPU: no memory size to share out, so exclusive
		}
		steps := mem.Value.Value() / ShareStep.Value()
		if steps < 1 {
			return fmt.Errorf("device %s has %s of memory, less than one share of %s", d.Name, mem.Value.String(), ShareStep.String())
		}
		all := *resource.NewQuantity(steps*ShareStep.Value(), resource.BinarySI)
		maxShare, minShare, step := all.DeepCopy(), ShareStep.DeepCopy(), ShareStep.DeepCopy()
		mem.RequestPolicy = &resourceapi.CapacityRequestPolicy{
			Default:    &all,
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &minShare, Max: &maxShare, Step: &step},
		}
		d.Capacity[CapacityMemory] = mem
		yes := true
		d.AllowMultipleAllocations = &yes
	}
	return nil
}
