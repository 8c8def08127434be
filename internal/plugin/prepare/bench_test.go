package prepare

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// BenchmarkPrepareUnprepare measures one prepare+unprepare cycle of a claim
// with the shipped defaults (checkpoint file fsync on each write, no
// directory fsync). Reported: ns/op plus the p50/p99 cycle latency in µs.
func BenchmarkPrepareUnprepare(b *testing.B) {
	for _, tc := range []struct {
		name string
		gpus int
	}{{"1gpu", 1}, {"8gpu", 8}} {
		b.Run(tc.name, func(b *testing.B) {
			m := benchManager(b)
			var devices []string
			for i := 0; i < tc.gpus; i++ {
				devices = append(devices, fmt.Sprintf("gpu-%d", i))
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := gpuClaim(fmt.Sprintf("eeeeeeee-0000-0000-0000-%012d", i), "bench", devices...)
				start := time.Now()
				if _, err := m.Prepare(b.Context(), c); err != nil {
					b.Fatal(err)
				}
				if err := m.Unprepare(b.Context(), ref(c)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkParallelCallers runs 8 independent callers, each cycling a 1-GPU
// claim on its own GPU, and reports cycles/s.
func BenchmarkParallelCallers(b *testing.B) {
	m := benchManager(b)
	const callers = 8
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := (b.N + callers - 1) / callers
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				c := gpuClaim(fmt.Sprintf("ffffffff-%04d-0000-0000-%012d", w, i), "bench", fmt.Sprintf("gpu-%d", w))
				if _, err := m.Prepare(b.Context(), c); err != nil {
					b.Error(err)
					return
				}
				if err := m.Unprepare(b.Context(), ref(c)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*callers)/time.Since(start).Seconds(), "cycles/s")
}

// BenchmarkPrepareBatchOf8 prepares 8 one-GPU claims in one call, as the
// kubelet does for a pod with 8 claims, then unprepares them.
func BenchmarkPrepareBatchOf8(b *testing.B) {
	m := benchManager(b)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		claims := make([]*resourceapi.ResourceClaim, 8)
		refs := make([]kubeletplugin.NamespacedObject, 8)
		for g := range claims {
			claims[g] = gpuClaim(fmt.Sprintf("abababab-%04d-0000-0000-%012d", g, i), "bench", fmt.Sprintf("gpu-%d", g))
			refs[g] = ref(claims[g])
		}
		start := time.Now()
		for _, r := range m.PrepareClaims(b.Context(), claims) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		lat = append(lat, time.Since(start))
		for _, err := range m.UnprepareClaims(b.Context(), refs) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	reportPercentiles(b, lat)
}

func benchManager(b *testing.B) *Manager {
	b.Helper()
	m, _ := newEnv(b, 8).manager()
	return m
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}
