package slice

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Modes of consumable shares (--consumable-shares), the values NVIDIA's DRA
// driver accepts for its flag of the same name; a positive integer N is the
// fourth form (SharesCount).
const (
	// SharesDisabled publishes every device for one claim at a time.
	SharesDisabled = "disabled"
	// SharesMemory: claims consume memory, all of it unless they ask for less.
	SharesMemory = "memory"
	// SharesUnlimited: claims consume no memory unless they ask for some, so
	// any number of them share a device.
	SharesUnlimited = "unlimited"
)

// CapacityShares is the capacity a device shared by count (SharesCount)
// publishes: how many claims it takes.
const CapacityShares resourceapi.QualifiedName = "shares"

// ShareStep is the granularity of consumable memory: requests are rounded
// up to a multiple of it by the scheduler.
var ShareStep = resource.MustParse("1Mi")

// ConsumableShares is a parsed --consumable-shares value. The zero value is
// disabled.
type ConsumableShares struct {
	// Mode is SharesMemory or SharesUnlimited, "" when disabled, and also
	// SharesUnlimited's memory policy for a count (see Count).
	Mode string
	// Count is N for the count form: each device takes at most N claims,
	// whose memory policy is SharesUnlimited's.
	Count int64
}

// ParseConsumableShares reads a --consumable-shares value: "" or
// "disabled", "memory", "unlimited", or a positive integer.
func ParseConsumableShares(s string) (ConsumableShares, error) {
	switch v := strings.TrimSpace(s); v {
	case "", SharesDisabled:
		return ConsumableShares{}, nil
	case SharesMemory, SharesUnlimited:
		return ConsumableShares{Mode: v}, nil
	default:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return ConsumableShares{}, fmt.Errorf("--consumable-shares=%q: must be %q, %q, %q or a positive integer "+
				"(the most claims that share one device)", s, SharesDisabled, SharesMemory, SharesUnlimited)
		}
		return ConsumableShares{Mode: SharesUnlimited, Count: n}, nil
	}
}

// Enabled tells whether devices are published as shares.
func (c ConsumableShares) Enabled() bool { return c.Mode != "" }

// String is the flag value that parses into c.
func (c ConsumableShares) String() string {
	switch {
	case c.Count > 0:
		return strconv.FormatInt(c.Count, 10)
	case c.Mode == "":
		return SharesDisabled
	}
	return c.Mode
}

// WithConsumableShares turns whole GPUs and static MIG devices into
// consumable-capacity devices (KEP-5075, DRAConsumableCapacity, beta and on
// by default since 1.36): each may be allocated to several claims at once
// (allowMultipleAllocations) as long as what they consume fits its
// capacities. The memory capacity is rounded down to a whole ShareStep and
// gets a request policy with that step, up to all of it:
//
//   - SharesMemory: a claim that asks for no memory consumes all of it, so
//     it never shares the device by accident; requests start at one step;
//   - SharesUnlimited and a count: a claim consumes only the memory it asks
//     for, none by default;
//   - a count N also publishes capacity "shares" = N, of which every claim
//     consumes one (or as many as it asks for).
//
// Each allocation carries a ShareID and its consumedCapacity; the kubelet
// plugin enforces a share's memory (an MPS pinned-memory limit,
// internal/plugin/sharing).
//
// Devices on dynamic MIG counters are left as they are: a partitionable GPU
// consumes all its counters with every allocation, so a second share could
// never be allocated (the plugin refuses consumable shares with
// --mig=dynamic for that reason). So are devices without a memory capacity
// (unified-memory GPUs): nothing to share out, so they stay exclusive.
func WithConsumableShares(devices []resourceapi.Device, c ConsumableShares) error {
	if !c.Enabled() {
		return nil
	}
	for i := range devices {
		d := &devices[i]
		if t := d.Attributes[AttrType].StringValue; t == nil || (*t != DeviceTypeGPU && *t != DeviceTypeMIG) || len(d.ConsumesCounters) > 0 {
			continue
		}
		mem, ok := d.Capacity[CapacityMemory]
		if !ok {
			continue
		}
		steps := mem.Value.Value() / ShareStep.Value()
		if steps < 1 {
			return fmt.Errorf("device %s has %s of memory, less than one share of %s", d.Name, mem.Value.String(), ShareStep.String())
		}
		mem.Value = *resource.NewQuantity(steps*ShareStep.Value(), resource.BinarySI)
		mem.RequestPolicy = memoryPolicy(mem.Value, c)
		d.Capacity[CapacityMemory] = mem
		if c.Count > 0 {
			n, one := *resource.NewQuantity(c.Count, resource.DecimalSI), resource.MustParse("1")
			d.Capacity[CapacityShares] = resourceapi.DeviceCapacity{Value: n, RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    ptr(one.DeepCopy()),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr(one.DeepCopy()), Max: ptr(n.DeepCopy()), Step: ptr(one.DeepCopy())},
			}}
		}
		yes := true
		d.AllowMultipleAllocations = &yes
	}
	return nil
}

// memoryPolicy is the memory request policy of a device with all memory
// (a multiple of ShareStep).
func memoryPolicy(all resource.Quantity, c ConsumableShares) *resourceapi.CapacityRequestPolicy {
	minShare, def := resource.MustParse("0"), resource.MustParse("0")
	if c.Mode == SharesMemory {
		minShare, def = ShareStep.DeepCopy(), all.DeepCopy()
	}
	return &resourceapi.CapacityRequestPolicy{
		Default:    &def,
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &minShare, Max: ptr(all.DeepCopy()), Step: ptr(ShareStep.DeepCopy())},
	}
}

func ptr[T any](v T) *T { return &v }
