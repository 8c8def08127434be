package prepare

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkPrepareMPS measures the prepare and the unprepare of a 1-GPU
// claim with the MPS strategy (thread percentage and pinned-memory limit),
// in process with the fake MPS control binary: start the daemon, wait until
// it listens, send the settings through the control client, write the CDI
// spec and checkpoint; unprepare sends quit and waits for the exit. A real
// nvidia-cuda-mps-control starts more slowly; the plugin's own share is what
// this shows. Reported: p50/p99 of prepare alone, and of unprepare.
func BenchmarkPrepareMPS(b *testing.B) {
	m := benchManager(b)
	prep := make([]time.Duration, 0, b.N)
	unprep := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := configured(fmt.Sprintf("cdcdcdcd-0000-0000-0000-%012d", i), "bench-mps", []alloc{{request: "gpu", device: "gpu-0"}},
			`{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}`)
		start := time.Now()
		if _, err := m.Prepare(b.Context(), c); err != nil {
			b.Fatal(err)
		}
		prep = append(prep, time.Since(start))
		start = time.Now()
		if err := m.Unprepare(b.Context(), ref(c)); err != nil {
			b.Fatal(err)
		}
		unprep = append(unprep, time.Since(start))
	}
	reportPercentiles(b, prep)
	b.ReportMetric(float64(percentile(unprep, 0.50).Microseconds()), "unprepare-p50-µs")
	b.ReportMetric(float64(percentile(unprep, 0.99).Microseconds()), "unprepare-p99-µs")
}

func percentile(lat []time.Duration, p float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}
