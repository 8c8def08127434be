package health

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// ProbeAll probes every GPU once.
func (m *Monitor) ProbeAll(ctx context.Context) {
	for _, g := range m.cfg.GPUs {
		m.probe(ctx, g)
	}
}

// probe asks one GPU whether it answers, which recovery action the driver
// wants and whether uncorrectable ECC errors were counted, and updates its
// conditions.
func (m *Monitor) probe(ctx context.Context, gpu GPU) {
	if m.cfg.PassedThrough != nil && m.cfg.PassedThrough(gpu.UUID) {
		return
	}
	logger := klog.FromContext(ctx)
	dev := m.device(ctx, gpu)
	if dev == nil {
		return // still lost: device said so
	}
	now := m.cfg.now()
	ret := m.timed("GetMemoryInfo", func() nvml.Return {
		_, r := dev.GetMemoryInfo()
		return r
	})
	switch ret {
	case nvml.ERROR_GPU_IS_LOST:
		m.setLost(ctx, gpu.UUID, "gpu-is-lost")
		return
	case nvml.ERROR_RESET_REQUIRED:
		m.setLost(ctx, gpu.UUID, "reset-required")
		return
	case nvml.SUCCESS:
		// A GPU that was lost and answers again has been reset (or the
		// node rebooted): that is the recovery its conditions wait for.
		m.update(ctx, gpu.UUID, func(g *gpuState) bool {
			if !g.clear(KeyLost) {
				return false
			}
			g.recoveryPending = true
			return true
		})
	default:
		// Not a verdict on the GPU's health; the next probe asks again.
		logger.V(2).Info("GPU probe failed", "gpu", gpu.Name, "error", ret.Error())
		return
	}

	action, known := m.recoveryAction(dev)
	var ecc uint64
	eccRet := m.timed("GetTotalEccErrors", func() nvml.Return {
		var r nvml.Return
		ecc, r = dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		return r
	})
	hold := m.cfg.DegradedHold
	m.update(ctx, gpu.UUID, func(g *gpuState) bool {
		changed := false
		if eccRet == nvml.SUCCESS && ecc < g.eccBaseline {
			// The volatile counter fell back: the GPU was reset or the
			// driver reloaded. A driver that reports no recovery action
			// gives no other sign of a reset, and one that does may never
			// have asked for one (a contained ECC error asks for none).
			g.recoveryPending = true
		}
		if !known && g.recoveryPending {
			known, action = true, nvml.GPU_RECOVERY_ACTION_NONE // back from lost, no field to say otherwise
		}
		if known {
			if action != nvml.GPU_RECOVERY_ACTION_NONE {
				g.recoveryPending = true
				changed = g.set(recoveryCondition(action, now)) || changed
			} else {
				changed = g.clear(KeyRecovery) || changed
				if g.recoveryPending {
					changed = g.expireMIG(nil, now, hold, true) || changed
					// The reset (or reboot) the driver asked for happened.
					g.recoveryPending = false
					for k, c := range g.conds {
						if c.untilRecovered {
							delete(g.conds, k)
							changed = true
						}
					}
				}
			}
		}
		if eccRet == nvml.SUCCESS {
			// The baseline starts at 0, the count when the driver loaded:
			// errors counted while the plugin was down are faults too.
			if ecc > g.eccBaseline {
				changed = g.set(eccCondition(now)) || changed
			}
			g.eccBaseline = ecc
		}
		changed = g.expireMIG(dev, now, hold, false) || changed
		for k, c := range g.conds {
			if !c.untilRecovered && c.Key != KeyLost && c.Key != KeyRecovery && now.Sub(c.Since) >= hold && !g.recoveryPending {
				delete(g.conds, k)
				changed = true
			}
		}
		return changed
	})
}

// recoveryAction reads the driver's GPU recovery action (NVML field
// FI_DEV_GET_GPU_RECOVERY_ACTION, drivers R550 and later); known is false
// when the driver does not report it.
func (m *Monitor) recoveryAction(d nvml.Device) (nvml.DeviceGpuRecoveryAction, bool) {
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	ret := m.timed("GetFieldValues", func() nvml.Return { return d.GetFieldValues(values) })
	if ret != nvml.SUCCESS || nvml.Return(values[0].NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	v, ok := FieldUint(values[0])
	if !ok || v > math.MaxInt32 {
		return 0, false
	}
	return nvml.DeviceGpuRecoveryAction(v), true
}

// FieldUint decodes an integer NVML field value (little-endian, as the
// C union is laid out on the platforms NVML supports); false for a value
// type that is not an integer.
func FieldUint(v nvml.FieldValue) (uint64, bool) {
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT, nvml.VALUE_TYPE_SIGNED_INT:
		return uint64(binary.LittleEndian.Uint32(v.Value[:4])), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return binary.LittleEndian.Uint64(v.Value[:]), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return uint64(binary.LittleEndian.Uint16(v.Value[:2])), true
	}
	return 0, false
}

var recoveryNames = map[nvml.DeviceGpuRecoveryAction]string{
	nvml.GPU_RECOVERY_ACTION_NONE:                "none",
	nvml.GPU_RECOVERY_ACTION_GPU_RESET:           "gpu-reset",
	nvml.GPU_RECOVERY_ACTION_NODE_REBOOT:         "node-reboot",
	nvml.GPU_RECOVERY_ACTION_DRAIN_P2P:           "drain-p2p",
	nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET:     "drain-and-reset",
	nvml.GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: "recover-imex-domain",
	nvml.GPU_RECOVERY_ACTION_BUS_RESET:           "bus-reset",
	nvml.GPU_RECOVERY_ACTION_SYSTEM_REBOOT:       "system-reboot",
}

// RecoveryActionName names a driver recovery action the way the recovery
// taint's value does ("gpu-reset", "drain-p2p", ...; "action-<n>" for one
// this version does not know).
func RecoveryActionName(a nvml.DeviceGpuRecoveryAction) string {
	if name, ok := recoveryNames[a]; ok {
		return name
	}
	return fmt.Sprintf("action-%d", a)
}

// recoveryCondition: draining peer-to-peer traffic keeps running work
// (NoSchedule); every other action interrupts it (NoExecute).
func recoveryCondition(a nvml.DeviceGpuRecoveryAction, now time.Time) Condition {
	name := RecoveryActionName(a)
	effect := resourceapi.DeviceTaintEffectNoExecute
	if a == nvml.GPU_RECOVERY_ACTION_DRAIN_P2P {
		effect = resourceapi.DeviceTaintEffectNoSchedule
	}
	return Condition{Key: KeyRecovery, Value: name, Effect: effect, Since: now, Message: "the driver asks for recovery: " + name}
}
