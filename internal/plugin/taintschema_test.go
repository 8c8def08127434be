package plugin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// In the NVIDIA mode the health taints are NVIDIA's by default (its keys,
// NoSchedule, one taint per key holding the latest), gpudra's in NVIDIA's
// domain with --health-taints=gpudra, and gpudra's natively.
func TestPublishedTaints(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	const (
		noExec = resourceapi.DeviceTaintEffectNoExecute
		noSch  = resourceapi.DeviceTaintEffectNoSchedule
	)
	taint := func(key, value string, effect resourceapi.DeviceTaintEffect, at *metav1.Time) resourceapi.DeviceTaint {
		return resourceapi.DeviceTaint{Key: key, Value: value, Effect: effect, TimeAdded: at}
	}
	other := taint("example.com/maintenance", "", noSch, nil)
	nvidia := compat.MustResolve(compat.Flags{Compatibility: "nvidia"})
	nvidiaGpudra := compat.MustResolve(compat.Flags{Compatibility: "nvidia", HealthTaints: "gpudra"})
	native := compat.Default()
	tests := []struct {
		name  string
		names compat.Names
		in    []resourceapi.DeviceTaint
		want  []resourceapi.DeviceTaint
	}{
		{name: "nvidia: a fatal XID is NoSchedule", names: nvidia,
			in:   []resourceapi.DeviceTaint{taint(health.KeyXID, "79", noExec, &t0)},
			want: []resourceapi.DeviceTaint{taint("gpu.nvidia.com/xid", "79", noSch, &t0)}},
		{name: "nvidia: a lost GPU is gpu-lost without a value", names: nvidia,
			in:   []resourceapi.DeviceTaint{taint(health.KeyLost, "gpu-is-lost", noExec, &t0), other},
			want: []resourceapi.DeviceTaint{taint("gpu.nvidia.com/gpu-lost", "", noSch, &t0), other}},
		{name: "nvidia: ECC and recovery action are the XIDs NVIDIA's monitor sees, the latest wins", names: nvidia,
			in: []resourceapi.DeviceTaint{taint(health.KeyECC, "double-bit", noExec, &t1), taint(health.KeyXID, "94", noSch, &t0),
				taint(health.KeyRecovery, "gpu-reset", noExec, &t0)},
			want: []resourceapi.DeviceTaint{taint("gpu.nvidia.com/xid", "48", noSch, &t1)}},
		{name: "nvidia: recovery action alone", names: nvidia,
			in:   []resourceapi.DeviceTaint{taint(health.KeyRecovery, "node-reboot", noExec, &t0)},
			want: []resourceapi.DeviceTaint{taint("gpu.nvidia.com/xid", "154", noSch, &t0)}},
		{name: "nvidia with gpudra's taints: keys moved, effects kept", names: nvidiaGpudra,
			in: []resourceapi.DeviceTaint{taint(health.KeyXID, "79", noExec, &t0), taint(health.KeyECC, "double-bit", noExec, &t1), other},
			want: []resourceapi.DeviceTaint{taint("gpu.nvidia.com/xid", "79", noExec, &t0),
				taint("gpu.nvidia.com/ecc", "double-bit", noExec, &t1), other}},
		{name: "native: unchanged", names: native,
			in:   []resourceapi.DeviceTaint{taint(health.KeyLost, "reset-required", noExec, &t0)},
			want: []resourceapi.DeviceTaint{taint(health.KeyLost, "reset-required", noExec, &t0)}},
		{name: "no taints", names: nvidia},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]resourceapi.DeviceTaint(nil), tc.in...)
			require.Equal(t, tc.want, publishedTaints(tc.names, in))
			require.Equal(t, tc.in, in, "the input must not change")
		})
	}
}
