//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// What a dra.sock benchmark reports beside latencies, to show where the
// time goes: CPU per cycle of each process on the machine (the API server,
// etcd and the plugin share its cores), the plugin's own breakdown of each
// prepare and unprepare (its phase histograms) and what a file creation
// costs in the plugin's directory.

// benchProbe reads, for one plugin, the CPU time of each process sharing
// the machine (seconds by process name; "total": busy time of the machine)
// and the plugin's metrics.
type benchProbe struct {
	pids    map[string]int // plugin, kube-apiserver, etcd, bench (this process)
	metrics string         // the plugin's /metrics URL
}

func newBenchProbe(b *testing.B, plugin *benchPlugin) *benchProbe {
	p := &benchProbe{pids: map[string]int{"plugin": plugin.cmd.Process.Pid, "bench": os.Getpid()}, metrics: plugin.metricsURL}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		raw, err := os.ReadFile(realCluster.PIDFile(name))
		if err != nil {
			b.Fatalf("pid of %s: %v", name, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			b.Fatalf("pid of %s: %v", name, err)
		}
		p.pids[name] = pid
	}
	return p
}

// cpu reads the CPU times of the probe's processes and of the machine.
func (p *benchProbe) cpu(b *testing.B) map[string]float64 {
	s := map[string]float64{"total": machineBusySeconds(b)}
	for name, pid := range p.pids {
		s[name] = processCPUSeconds(b, pid)
	}
	return s
}

// scrape reads the plugin's metrics (nil for a plugin without them).
func (p *benchProbe) scrape(b *testing.B) map[string]*dto.MetricFamily {
	return scrapeFamilies(b, p.metrics)
}

// usage is what a probe saw over one or more spans of a case: the CPU
// seconds of each process summed over the spans (the other driver's spans
// fall between them), and the plugin's metrics before the first span and
// after the last (its histograms move only in its own spans).
type usage struct {
	cpu           map[string]float64
	before, after map[string]*dto.MetricFamily
}

// addSpan adds the CPU used between two readings of p.cpu.
func (u *usage) addSpan(before, after map[string]float64) {
	if u.cpu == nil {
		u.cpu = map[string]float64{}
	}
	for name, v := range after {
		u.cpu[name] += v - before[name]
	}
}

// report adds what u saw to b's metrics, per cycle (one prepare and one
// unprepare call) and per claim.
func (u *usage) report(b *testing.B, cycles, claims int) {
	perCycle := func(sec float64) float64 { return sec * 1000 / float64(cycles) }
	other := u.cpu["total"]
	for _, name := range []string{"plugin", "kube-apiserver", "etcd", "bench"} {
		d := u.cpu[name]
		other -= d
		b.ReportMetric(perCycle(d), "cpu-"+name+"-ms/cycle")
	}
	b.ReportMetric(perCycle(max(other, 0)), "cpu-other-ms/cycle")
	if u.after == nil {
		return
	}
	before, after := u.before, u.after
	for _, op := range []string{"prepare", "unprepare"} {
		for phase, h := range histogramDelta(before, after, "gpudra_plugin_phase_duration_seconds",
			map[string]string{"operation": op}, "phase") {
			b.ReportMetric(h.mean()*1e6, op+"-"+phase+"-µs")
			b.ReportMetric(h.quantileBound(0.99)*1e6, op+"-"+phase+"-p99≤µs")
		}
	}
	for method, h := range histogramDelta(before, after, "gpudra_plugin_call_duration_seconds", nil, "method") {
		b.ReportMetric(h.mean()*1e6, "served-"+method+"-µs")
	}
	for _, h := range histogramDelta(before, after, "gpudra_plugin_claim_read_duration_seconds", nil, "") {
		b.ReportMetric(h.mean()*1e6, "claim-read-µs")
		b.ReportMetric(h.quantileBound(0.99)*1e6, "claim-read-p99≤µs")
	}
	writes := counterDelta(before, after, "gpudra_plugin_claim_status_writes_total", "result", "applied")
	b.ReportMetric(writes/float64(claims), "status-writes/claim-cycle")
}

// histDelta is the difference of one histogram series between snapshots.
type histDelta struct {
	count, sum float64
	bounds     []float64 // upper bounds, ascending
	cumulative []float64 // cumulative counts per bound
}

func (h histDelta) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / h.count
}

// quantileBound is the upper bound of the bucket holding quantile q (+Inf
// reported as the largest finite bound).
func (h histDelta) quantileBound(q float64) float64 {
	for i, c := range h.cumulative {
		if c >= q*h.count {
			return h.bounds[i]
		}
	}
	if len(h.bounds) == 0 {
		return 0
	}
	return h.bounds[len(h.bounds)-1]
}

// histogramDelta returns, per value of the label by ("" for a histogram
// without labels), the series of family name matching labels.
func histogramDelta(before, after map[string]*dto.MetricFamily, name string, labels map[string]string, by string) map[string]histDelta {
	out := map[string]histDelta{}
	find := func(fams map[string]*dto.MetricFamily, key string) *dto.Histogram {
		for _, m := range fams[name].GetMetric() {
			if seriesKey(m, labels, by) == key {
				return m.GetHistogram()
			}
		}
		return nil
	}
	for _, m := range after[name].GetMetric() {
		key := seriesKey(m, labels, by)
		if key == "\x00" {
			continue
		}
		a, p := m.GetHistogram(), find(before, key)
		d := histDelta{count: float64(a.GetSampleCount()), sum: a.GetSampleSum()}
		if p != nil {
			d.count -= float64(p.GetSampleCount())
			d.sum -= p.GetSampleSum()
		}
		for i, bk := range a.GetBucket() {
			if math.IsInf(bk.GetUpperBound(), 1) {
				continue
			}
			c := float64(bk.GetCumulativeCount())
			if p != nil && i < len(p.GetBucket()) {
				c -= float64(p.GetBucket()[i].GetCumulativeCount())
			}
			d.bounds, d.cumulative = append(d.bounds, bk.GetUpperBound()), append(d.cumulative, c)
		}
		if d.count > 0 {
			out[key] = d
		}
	}
	return out
}

// seriesKey is m's value of label by if m matches labels, "\x00" if not.
func seriesKey(m *dto.Metric, labels map[string]string, by string) string {
	key, matched := "", 0
	for _, l := range m.GetLabel() {
		if want, ok := labels[l.GetName()]; ok {
			if want != l.GetValue() {
				return "\x00"
			}
			matched++
		}
		if l.GetName() == by {
			key = l.GetValue()
		}
	}
	if matched != len(labels) {
		return "\x00"
	}
	return key
}

func counterDelta(before, after map[string]*dto.MetricFamily, name, label, value string) float64 {
	sum := func(fams map[string]*dto.MetricFamily) float64 {
		for _, m := range fams[name].GetMetric() {
			if seriesKey(m, map[string]string{label: value}, "") != "\x00" {
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	return sum(after) - sum(before)
}

func scrapeFamilies(b *testing.B, url string) map[string]*dto.MetricFamily {
	if url == "" {
		return nil
	}
	resp, err := http.Get(url) //nolint:noctx // a local scrape in a benchmark
	if err != nil {
		b.Fatalf("scrape %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatalf("scrape %s: %v", url, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		b.Fatalf("parse metrics of %s: %v", url, err)
	}
	return fams
}

// processCPUSeconds is the user+system CPU time of a process so far.
func processCPUSeconds(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("CPU time of process %d: %v", pid, err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// machineBusySeconds is the CPU time all cores spent not idle.
func machineBusySeconds(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(strings.SplitN(string(raw), "\n", 2)[0])[1:]
	busy := 0.0
	for i, v := range f {
		n, _ := strconv.ParseFloat(v, 64)
		if i != 3 && i != 4 && i < 8 { // not idle, not iowait; guest time is in user
			busy += n
		}
	}
	return busy / clockTicks
}

// fileChurnMicros is what creating, writing and removing one small file
// costs in dir (µs, mean of n): the plugin does that about five times per
// prepare+unprepare. On an ext4 without a journal each new inode skips the
// inodes freed in the last minutes, so this grows with recent churn.
func fileChurnMicros(b *testing.B, dir string, n int) float64 {
	data := make([]byte, 700)
	start := time.Now()
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf(".churn-%d", i))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			b.Fatal(err)
		}
	}
	return float64(time.Since(start).Microseconds()) / float64(n)
}

// dropPageCache writes the files back and drops their pages from the page
// cache (fadvise DONTNEED), so that the next process maps them as read from
// disk. How a file entered the page cache decides the size of its folios,
// and the kernel maps a large folio whole: the same binary, freshly linked,
// counted up to 15 MiB more RSS than after a copy or a reboot.
func dropPageCache(b *testing.B, paths ...string) {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatalf("drop %s from the page cache: %v", p, err)
		}
		_ = f.Close()
	}
}

// freeLocalPort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freeLocalPort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
