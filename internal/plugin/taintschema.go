package plugin

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// XIDs that NVIDIA's driver reports for conditions gpudra watches by other
// means; its health monitor sees them as critical XIDs.
const (
	// xidDoubleBitECC accompanies an uncorrectable ECC error (gpudra's ecc
	// condition, from the ECC event and counters).
	xidDoubleBitECC = "48"
	// xidRecoveryAction reports that the driver's recovery action changed
	// (gpudra's recovery-action condition, from the probe).
	xidRecoveryAction = "154"
)

// publishedTaints returns the taints a device is published with: the health
// monitor's (internal/plugin/health's keys) in the schema the names select,
// other taints unchanged. The result is a new slice; nil for none.
func publishedTaints(n compat.Names, in []resourceapi.DeviceTaint) []resourceapi.DeviceTaint {
	if len(in) == 0 {
		return nil
	}
	out := make([]resourceapi.DeviceTaint, 0, len(in))
	if n.HealthTaints != compat.TaintsNVIDIA {
		for _, t := range in {
			t.Key = n.TaintKey(t.Key)
			out = append(out, t)
		}
		return out
	}
	// NVIDIA's schema has one taint per key, updated in place by the latest
	// event: of several conditions on one key the latest is published.
	at := map[string]int{}
	for _, t := range in {
		nt, ok := nvidiaTaint(t)
		if !ok {
			out = append(out, t)
			continue
		}
		if i, seen := at[nt.Key]; seen {
			if after(nt.TimeAdded, out[i].TimeAdded) {
				out[i] = nt
			}
			continue
		}
		at[nt.Key] = len(out)
		out = append(out, nt)
	}
	return out
}

// nvidiaTaint maps one health taint onto NVIDIA's keys and effects: every
// condition becomes NoSchedule (NVIDIA's driver never evicts), a lost GPU
// <driver>/gpu-lost without a value, everything else <driver>/xid=<XID>.
func nvidiaTaint(t resourceapi.DeviceTaint) (resourceapi.DeviceTaint, bool) {
	out := resourceapi.DeviceTaint{Key: compat.NVIDIATaintXID, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: t.TimeAdded}
	switch t.Key {
	case health.KeyXID:
		out.Value = t.Value
	case health.KeyECC:
		out.Value = xidDoubleBitECC
	case health.KeyRecovery:
		out.Value = xidRecoveryAction
	case health.KeyLost:
		out.Key = compat.NVIDIATaintGPULost
	default:
		return t, false
	}
	if t.Effect == resourceapi.DeviceTaintEffectNone {
		out.Effect = t.Effect
	}
	return out, true
}

// after reports whether a is later than b; a time beats none.
func after(a, b *metav1.Time) bool {
	return a != nil && (b == nil || b.Before(a))
}
