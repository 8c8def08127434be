package health

import (
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

// Taint keys, in the driver's domain. The value says which error it was.
const (
	// KeyXID: a critical XID; value: the XID number.
	KeyXID = "gpu.gpudra.io/xid"
	// KeyECC: an uncorrectable ECC error; value: double-bit.
	KeyECC = "gpu.gpudra.io/ecc"
	// KeyLost: NVML cannot reach the GPU; value: gpu-is-lost or reset-required.
	KeyLost = "gpu.gpudra.io/lost"
	// KeyRecovery: the driver asks for a recovery action; value: gpu-reset,
	// node-reboot, drain-p2p, drain-and-reset, bus-reset, system-reboot, ...
	KeyRecovery = "gpu.gpudra.io/recovery-action"
)

// Health of a device.
type Health string

const (
	Healthy   Health = "Healthy"
	Degraded  Health = "Degraded"  // NoSchedule: running work continues, no new work
	Unhealthy Health = "Unhealthy" // NoExecute: running work is evicted
)

// Condition is one reason a GPU is not healthy; it becomes one device taint.
type Condition struct {
	Key     string
	Value   string
	Effect  resourceapi.DeviceTaintEffect
	Message string
	Since   time.Time
	// untilRecovered: cleared once the driver's recovery action, after
	// having been pending, reads none again (the GPU was reset or the node
	// rebooted), or the volatile ECC counter shows a reset (it falls back;
	// also with that field, which a contained ECC error leaves at none).
	// Otherwise the condition stays until the node reboots.
	untilRecovered bool
}

func severity(e resourceapi.DeviceTaintEffect) int {
	switch e {
	case resourceapi.DeviceTaintEffectNoExecute:
		return 2
	case resourceapi.DeviceTaintEffectNoSchedule:
		return 1
	}
	return 0
}

// gpuState is what the monitor knows about one physical GPU.
type gpuState struct {
	conds map[string]Condition // by taint key
	// recoveryPending: the driver's recovery action was seen other than none.
	recoveryPending bool
	// eccBaseline is the volatile uncorrectable ECC count last read. It
	// starts at 0 (or the saved value of this boot): the volatile counter
	// is zeroed when the driver loads and when the GPU is reset, so any
	// count above it is an error since then.
	eccBaseline uint64
	// mig holds the conditions of MIG-scoped XIDs by GPU instance ID
	// (migscope.go).
	mig map[uint32]*migScope
}

// set adds or replaces the condition of its key; a weaker condition does not
// replace a stronger one. It reports whether anything changed.
func (g *gpuState) set(c Condition) bool {
	old, ok := g.conds[c.Key]
	if ok && severity(old.Effect) > severity(c.Effect) {
		return false
	}
	if ok && old.Value == c.Value && old.Effect == c.Effect && old.Message == c.Message {
		return false
	}
	if ok && old.Value == c.Value && old.Effect == c.Effect {
		c.Since = old.Since
	}
	g.conds[c.Key] = c
	return true
}

func (g *gpuState) clear(key string) bool {
	if _, ok := g.conds[key]; !ok {
		return false
	}
	delete(g.conds, key)
	return true
}

// Snapshot is the health of every GPU at one moment, by GPU UUID. MIG
// devices take their parent GPU's entry.
type Snapshot struct {
	GPUs map[string][]Condition
	// MIG holds the conditions of MIG-scoped XIDs: GPU UUID -> placement
	// start of the GPU instance -> conditions (migscope.go).
	MIG map[string]map[int][]Condition
}

// Conditions of a GPU, strongest first.
func (s Snapshot) Conditions(uuid string) []Condition { return s.GPUs[uuid] }

// Health of a GPU: Unhealthy with any NoExecute condition, Degraded with
// only NoSchedule ones, else Healthy.
func (s Snapshot) Health(uuid string) Health { return healthOf(s.GPUs[uuid]) }

// Message joins the conditions' messages of a GPU.
func (s Snapshot) Message(uuid string) string { return messageOf(s.GPUs[uuid]) }

// Taints of a GPU, in key order.
func (s Snapshot) Taints(uuid string) []resourceapi.DeviceTaint { return taintsOf(s.GPUs[uuid]) }

func taintsOf(conds []Condition) []resourceapi.DeviceTaint {
	if len(conds) == 0 {
		return nil
	}
	out := make([]resourceapi.DeviceTaint, 0, len(conds))
	for _, c := range conds {
		t := resourceapi.DeviceTaint{Key: c.Key, Value: c.Value, Effect: c.Effect}
		if !c.Since.IsZero() {
			added := metav1Time(c.Since)
			t.TimeAdded = &added
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b resourceapi.DeviceTaint) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (g *gpuState) snapshot() []Condition {
	if len(g.conds) == 0 {
		return nil
	}
	out := make([]Condition, 0, len(g.conds))
	for _, c := range g.conds {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Condition) int {
		if d := severity(b.Effect) - severity(a.Effect); d != 0 {
			return d
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}
