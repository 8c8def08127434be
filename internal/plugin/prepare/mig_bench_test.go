package prepare

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpudra/gpudra/internal/plugin/mig"
)

// BenchmarkDynamicMIGPrepare measures a dynamic-MIG claim (1g.10gb on a
// simulated H100) with the shipped checkpoint defaults: prepare (record
// PrepareStarted, create the GPU and compute instance through NVML, write
// the CDI spec, record PrepareCompleted) and the full prepare+unprepare
// cycle. "sim-state" also writes the simulated NVML's state file on every
// MIG change, as the local cluster does. The simulated NVML answers in
// microseconds; on a real GPU creating a GPU instance takes the driver far
// longer, which this does not measure.
func BenchmarkDynamicMIGPrepare(b *testing.B) {
	for _, persist := range []bool{false, true} {
		name := "in-memory-nvml"
		if persist {
			name = "sim-state"
		}
		b.Run(name, func(b *testing.B) {
			e := newMIGEnv(b, "dgx-h100", mig.ModeDynamic)
			if !persist {
				e.state = ""
				e.open()
			}
			m, _ := e.manager()
			prep := make([]time.Duration, 0, b.N)
			cycle := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := gpuClaim(fmt.Sprintf("cdcdcdcd-0000-0000-0000-%012d", i), "bench", "gpu-0-mig-1g10gb-3")
				start := time.Now()
				if _, err := m.Prepare(b.Context(), c); err != nil {
					b.Fatal(err)
				}
				prep = append(prep, time.Since(start))
				if err := m.Unprepare(b.Context(), ref(c)); err != nil {
					b.Fatal(err)
				}
				cycle = append(cycle, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, cycle)
			reportNamed(b, "prepare", prep)
		})
	}
}

func reportNamed(b *testing.B, name string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sorted := append([]time.Duration(nil), lat...)
	slices.Sort(sorted)
	pct := func(p float64) float64 {
		return float64(sorted[min(len(sorted)-1, int(float64(len(sorted))*p))].Microseconds())
	}
	b.ReportMetric(pct(0.50), name+"-p50-µs")
	b.ReportMetric(pct(0.99), name+"-p99-µs")
}
