package health

import (
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Attribute names that tie a ResourceSlice device to a physical GPU: whole
// GPUs carry uuid, MIG devices also carry their parent's parentUUID.
const (
	attrUUID       resourceapi.QualifiedName = "uuid"
	attrParentUUID resourceapi.QualifiedName = "parentUUID"
)

// GPUOf returns the UUID of the physical GPU behind a slice device: its
// parentUUID (MIG devices) or else its uuid.
func GPUOf(d resourceapi.Device) string {
	for _, name := range []resourceapi.QualifiedName{attrParentUUID, attrUUID} {
		if v := d.Attributes[name].StringValue; v != nil && *v != "" {
			return *v
		}
	}
	return ""
}

// ApplyTaints returns copies of devices whose taints are the conditions of
// their physical GPU (MIG devices inherit their parent's, plus those of
// MIG-scoped XIDs of their GPU instance, migscope.go). Taints the
// devices already carry under keys other than the monitor's are kept.
func (s Snapshot) ApplyTaints(devices []resourceapi.Device) []resourceapi.Device {
	out := make([]resourceapi.Device, len(devices))
	for i, d := range devices {
		d.Taints = slices.DeleteFunc(slices.Clone(d.Taints), func(t resourceapi.DeviceTaint) bool { return isOurKey(t.Key) })
		start, isMIG := placementOf(d)
		d.Taints = append(d.Taints, taintsOf(s.deviceConditions(GPUOf(d), start, isMIG))...)
		if len(d.Taints) == 0 {
			d.Taints = nil
		}
		out[i] = d
	}
	return out
}

func isOurKey(k string) bool {
	return k == KeyXID || k == KeyECC || k == KeyLost || k == KeyRecovery
}

// DeviceRef names a device of a pool and the GPU behind it; a MIG device
// also its placement start (MIG-scoped conditions, migscope.go).
type DeviceRef struct {
	Pool, Device, GPU string
	Start             int
	IsMIG             bool
}

// Refs lists the devices of a pool with their GPUs.
func Refs(pool string, devices []resourceapi.Device) []DeviceRef {
	out := make([]DeviceRef, 0, len(devices))
	for _, d := range devices {
		start, isMIG := placementOf(d)
		out = append(out, DeviceRef{Pool: pool, Device: d.Name, GPU: GPUOf(d), Start: start, IsMIG: isMIG})
	}
	return out
}

// Report is the kubelet health report for devices: Healthy, or Unhealthy
// with the conditions' messages for any condition (the kubelet knows no
// "degraded"). timeout is the HealthCheckTimeout the kubelet applies.
func (s Snapshot) Report(refs []DeviceRef, now time.Time, timeout time.Duration) kubeletplugin.DeviceHealthReport {
	r := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(refs))}
	for _, ref := range refs {
		h := kubeletplugin.DeviceHealth{PoolName: ref.Pool, DeviceName: ref.Device, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: now, HealthCheckTimeout: timeout}
		if conds := s.deviceConditions(ref.GPU, ref.Start, ref.IsMIG); healthOf(conds) != Healthy {
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = messageOf(conds)
		}
		r.Devices = append(r.Devices, h)
	}
	return r
}
