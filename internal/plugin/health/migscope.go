package health

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// MIG-scoped XIDs. nvml.h (nvmlEventData_t): with MIG enabled, an XID
// event that is attributable to a GPU instance (and compute instance)
// carries their IDs; otherwise both are 0xFFFFFFFF. Such an XID is one MIG
// tenant's: it becomes a condition of that GPU instance, not of the GPU, so
// it taints the MIG devices that start at the instance's placement (static
// MIG: that MIG device; dynamic MIG: the placements of every profile that
// start there, which overlap it anyway) and leaves the GPU's other MIG
// devices alone. It lasts until the GPU instance is gone (destroyed, or a
// GPU reset) or, like a GPU condition, until the GPU's recovery or its hold
// time. A recovery action the driver asks for is always the GPU's. These
// conditions are not kept across plugin restarts: a restarted plugin sees
// the instance's next XID, and the GPU-wide recovery action, again.

// noInstance is the GPU/compute instance ID of an XID that no instance is
// responsible for.
const noInstance = 0xFFFFFFFF

// attrPlacementStart is the MIG device attribute that ties a slice device
// to a GPU instance's placement.
const attrPlacementStart resourceapi.QualifiedName = "placementStart"

// migScope is the conditions of one GPU instance of a GPU.
type migScope struct {
	start int
	conds map[string]Condition
}

// migOf resolves the GPU instance of an XID event to its placement start;
// ok is false when the event names no instance or the instance cannot be
// read (the XID then counts for the whole GPU).
func migOf(ctx context.Context, parent nvml.Device, ev nvml.EventData) (giID uint32, start int, ok bool) {
	if ev.GpuInstanceId == noInstance || parent == nil {
		return 0, 0, false
	}
	gi, ret := parent.GetGpuInstanceById(int(ev.GpuInstanceId))
	if ret != nvml.SUCCESS {
		klog.FromContext(ctx).V(2).Info("XID names a GPU instance that cannot be read; counted for the whole GPU",
			"gi", ev.GpuInstanceId, "error", ret.Error())
		return 0, 0, false
	}
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, 0, false
	}
	return ev.GpuInstanceId, int(info.Placement.Start), true
}

// parentOf returns the physical GPU of an event's device handle.
func parentOf(d nvml.Device) nvml.Device {
	if d == nil {
		return nil
	}
	if isMIG, ret := d.IsMigDeviceHandle(); ret == nvml.SUCCESS && isMIG {
		if p, ret := d.GetDeviceHandleFromMigDeviceHandle(); ret == nvml.SUCCESS {
			return p
		}
	}
	return d
}

// setMIG adds a condition to GPU instance giID at placement start.
func (g *gpuState) setMIG(giID uint32, start int, c Condition) bool {
	if g.mig == nil {
		g.mig = map[uint32]*migScope{}
	}
	s, ok := g.mig[giID]
	if !ok || s.start != start {
		s = &migScope{start: start, conds: map[string]Condition{}}
		g.mig[giID] = s
	}
	sub := gpuState{conds: s.conds}
	return sub.set(c)
}

// expireMIG drops the conditions of GPU instances that are gone (or hold
// another placement now), of recovered ones (untilRecovered, when
// recovered) and degraded ones older than hold.
func (g *gpuState) expireMIG(dev nvml.Device, now time.Time, hold time.Duration, recovered bool) bool {
	changed := false
	for id, s := range g.mig {
		gone := false
		if dev != nil {
			gi, ret := dev.GetGpuInstanceById(int(id))
			switch ret {
			case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_NOT_SUPPORTED:
				gone = true
			case nvml.SUCCESS:
				if info, r := gi.GetInfo(); r == nvml.SUCCESS && int(info.Placement.Start) != s.start {
					gone = true
				}
			}
		}
		for k, c := range s.conds {
			if gone || (recovered && c.untilRecovered) || (!c.untilRecovered && now.Sub(c.Since) >= hold && !g.recoveryPending) {
				delete(s.conds, k)
				changed = true
			}
		}
		if len(s.conds) == 0 {
			delete(g.mig, id)
		}
	}
	return changed
}

// migSnapshot is the MIG-scoped conditions of a GPU by placement start.
func (g *gpuState) migSnapshot() map[int][]Condition {
	if len(g.mig) == 0 {
		return nil
	}
	out := map[int][]Condition{}
	for _, s := range g.mig {
		out[s.start] = append(out[s.start], (&gpuState{conds: s.conds}).snapshot()...)
	}
	return out
}

// placementOf returns a slice device's placement start; false for a whole GPU.
func placementOf(d resourceapi.Device) (int, bool) {
	if d.Attributes[attrParentUUID].StringValue == nil {
		return 0, false
	}
	v := d.Attributes[attrPlacementStart].IntValue
	if v == nil {
		return 0, false
	}
	return int(*v), true
}

// deviceConditions are the conditions of a published device: its GPU's,
// and for a MIG device those of the GPU instance at its placement whose
// keys the GPU has not.
func (s Snapshot) deviceConditions(gpu string, start int, isMIG bool) []Condition {
	out := s.GPUs[gpu]
	if !isMIG {
		return out
	}
	for _, c := range s.MIG[gpu][start] {
		if !slices.ContainsFunc(out, func(o Condition) bool { return o.Key == c.Key }) {
			out = append(slices.Clip(out), c)
		}
	}
	return out
}

// DeviceHealth is the health of a published device (see deviceConditions).
func (s Snapshot) DeviceHealth(d resourceapi.Device) Health {
	start, isMIG := placementOf(d)
	return healthOf(s.deviceConditions(GPUOf(d), start, isMIG))
}

// DeviceMessage joins the messages of a published device's conditions.
func (s Snapshot) DeviceMessage(d resourceapi.Device) string {
	start, isMIG := placementOf(d)
	return messageOf(s.deviceConditions(GPUOf(d), start, isMIG))
}

func healthOf(conds []Condition) Health {
	h := Healthy
	for _, c := range conds {
		switch c.Effect {
		case resourceapi.DeviceTaintEffectNoExecute:
			return Unhealthy
		case resourceapi.DeviceTaintEffectNoSchedule:
			h = Degraded
		}
	}
	return h
}

func messageOf(conds []Condition) string {
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		parts = append(parts, c.Message)
	}
	return strings.Join(parts, "; ")
}

func migXIDMessage(xid uint64, what string, giID uint32, ev nvml.EventData) string {
	ci := "any"
	if ev.ComputeInstanceId != noInstance {
		ci = fmt.Sprint(ev.ComputeInstanceId)
	}
	return fmt.Sprintf("XID %d: %s (GPU instance %d, compute instance %s)", xid, what, giID, ci)
}
