// Package bench turns `go test -bench` output of gpudra's benchmarks into
// the performance report: a Markdown table with targets and the reference
// drivers' figures, and the same as JSON (test/cmd/bench-report).
package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Results maps a benchmark name (without the -GOMAXPROCS suffix) to its
// metrics by unit, e.g. "BenchmarkDRASock/1-gpu-claim" → "prepare-p99-ms" → 4.1.
type Results map[string]map[string]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads `go test -bench` output; other lines are ignored. A benchmark
// that appears twice keeps its last result.
func Parse(r io.Reader, into Results) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark line %q: value %q: %w", sc.Text(), f[i], err)
			}
			m[f[i+1]] = v
		}
		into[procSuffix.ReplaceAllString(f[0], "")] = m
	}
	return sc.Err()
}

// Row is one line of the report.
type Row struct {
	Group string `json:"group"`
	Label string `json:"label"`
	// Value is the measured figure; nil when the benchmark did not run.
	Value *float64 `json:"value"`
	Unit  string   `json:"unit"`
	// Target is the goal; Met says whether Value reaches it (nil: no goal or no value).
	Target    string `json:"target,omitempty"`
	Met       *bool  `json:"met,omitempty"`
	Reference string `json:"reference,omitempty"`
}

// metric names a figure: Bench and Metric in the results, or Ratio of two.
type metric struct {
	group, label, unit, reference string
	bench, name                   string
	ratio                         *[2][2]string // {{bench, metric}, {bench, metric}}
	atMost, atLeast               float64       // target; zero: none
}

// Reference figures measured on the development machine with the same
// method: dra-example-driver (issue 14; see referenceSource) and NVIDIA's
// GPU plugin (issue 7), as shipped and with client-go's QPS limit lifted.
// Targets: issue 14.
var metrics = []metric{
	{group: "dra.sock", label: "1-GPU claim: prepare p50", bench: "BenchmarkDRASock/1-gpu-claim", name: "prepare-p50-ms", unit: "ms", reference: "example 198.6 / 3.95 lifted; NVIDIA 197 / 6.3 lifted"},
	{group: "dra.sock", label: "1-GPU claim: prepare p90", bench: "BenchmarkDRASock/1-gpu-claim", name: "prepare-p90-ms", unit: "ms"},
	{group: "dra.sock", label: "1-GPU claim: prepare p99", bench: "BenchmarkDRASock/1-gpu-claim", name: "prepare-p99-ms", unit: "ms", atMost: 5, reference: "example 200.8 / 6.7 lifted"},
	{group: "dra.sock", label: "1-GPU claim: prepare max", bench: "BenchmarkDRASock/1-gpu-claim", name: "prepare-max-ms", unit: "ms"},
	{group: "dra.sock", label: "1-GPU claim: unprepare p50", bench: "BenchmarkDRASock/1-gpu-claim", name: "unprepare-p50-ms", unit: "ms"},
	{group: "dra.sock", label: "1-GPU claim: unprepare p99", bench: "BenchmarkDRASock/1-gpu-claim", name: "unprepare-p99-ms", unit: "ms"},
	{group: "dra.sock", label: "8-GPU claim: prepare p50", bench: "BenchmarkDRASock/8-gpu-claim", name: "prepare-p50-ms", unit: "ms"},
	{group: "dra.sock", label: "8-GPU claim: prepare p90", bench: "BenchmarkDRASock/8-gpu-claim", name: "prepare-p90-ms", unit: "ms"},
	{group: "dra.sock", label: "8-GPU claim: prepare p99", bench: "BenchmarkDRASock/8-gpu-claim", name: "prepare-p99-ms", unit: "ms"},
	{group: "dra.sock", label: "8-GPU claim: prepare max", bench: "BenchmarkDRASock/8-gpu-claim", name: "prepare-max-ms", unit: "ms"},
	{group: "dra.sock", label: "8-GPU claim: unprepare p50", bench: "BenchmarkDRASock/8-gpu-claim", name: "unprepare-p50-ms", unit: "ms"},
	{group: "dra.sock", label: "8-GPU claim: unprepare p99", bench: "BenchmarkDRASock/8-gpu-claim", name: "unprepare-p99-ms", unit: "ms"},
	{group: "dra.sock", label: "8 claims in one call: prepare p50", bench: "BenchmarkDRASock/8-claims-one-call", name: "prepare-p50-ms", unit: "ms", atMost: 10, reference: "example 1592 / 25.3 lifted; NVIDIA 1569 / 80"},
	{group: "dra.sock", label: "8 claims in one call: prepare p90", bench: "BenchmarkDRASock/8-claims-one-call", name: "prepare-p90-ms", unit: "ms"},
	{group: "dra.sock", label: "8 claims in one call: prepare p99", bench: "BenchmarkDRASock/8-claims-one-call", name: "prepare-p99-ms", unit: "ms"},
	{group: "dra.sock", label: "8 claims in one call: prepare max", bench: "BenchmarkDRASock/8-claims-one-call", name: "prepare-max-ms", unit: "ms"},
	{group: "dra.sock", label: "8 claims in one call: unprepare p50", bench: "BenchmarkDRASock/8-claims-one-call", name: "unprepare-p50-ms", unit: "ms"},
	{group: "dra.sock", label: "8 claims in one call: unprepare p99", bench: "BenchmarkDRASock/8-claims-one-call", name: "unprepare-p99-ms", unit: "ms"},
	{group: "dra.sock", label: "8 parallel callers, 1-GPU claims", bench: "BenchmarkDRASock/8-parallel-callers", name: "cycles/s", unit: "cycles/s", atLeast: 600, reference: "example 5.0 / 323 lifted; NVIDIA 5 / 94"},
	{group: "pods", label: "pod create → Running, no claim, p50", bench: "BenchmarkPodCreateToRunning/without-claim", name: "p50-ms", unit: "ms"},
	{group: "pods", label: "pod create → Running, no claim, p99", bench: "BenchmarkPodCreateToRunning/without-claim", name: "p99-ms", unit: "ms"},
	{group: "pods", label: "pod create → Running, 1-GPU claim, p50", bench: "BenchmarkPodCreateToRunning/with-claim", name: "p50-ms", unit: "ms"},
	{group: "pods", label: "pod create → Running, 1-GPU claim, p99", bench: "BenchmarkPodCreateToRunning/with-claim", name: "p99-ms", unit: "ms"},
	{group: "pods", label: "ratio with / without claim (p50)", unit: "×", atMost: 1.05, reference: "example 1.090; NVIDIA 1.14",
		ratio: &[2][2]string{{"BenchmarkPodCreateToRunning/with-claim", "p50-ms"}, {"BenchmarkPodCreateToRunning/without-claim", "p50-ms"}}},
	{group: "pods", label: "pod create → Running, claim created beforehand, p50", bench: "BenchmarkPodCreateToRunning/with-existing-claim", name: "p50-ms", unit: "ms"},
	{group: "pods", label: "ratio claim created beforehand / without claim (p50): without the controller-manager's claim creation", unit: "×", atMost: 1.05,
		ratio: &[2][2]string{{"BenchmarkPodCreateToRunning/with-existing-claim", "p50-ms"}, {"BenchmarkPodCreateToRunning/without-claim", "p50-ms"}}},
	{group: "start-up", label: "plugin start → dra.sock served", bench: "BenchmarkPluginStartup", name: "start-to-socket-ms", unit: "ms"},
	{group: "start-up", label: "plugin start → ResourceSlice visible (median)", bench: "BenchmarkPluginStartup", name: "start-to-slice-ms", unit: "ms", atMost: 500, reference: "example 1031 / 1045 lifted; NVIDIA 1063"},
	{group: "start-up", label: "plugin start → ResourceSlice visible (max)", bench: "BenchmarkPluginStartup", name: "start-to-slice-max-ms", unit: "ms"},
	{group: "memory", label: "plugin RSS, idle", bench: "BenchmarkDRASock/plugin-memory", name: "rss-idle-MiB", unit: "MiB", atMost: 40, reference: "example 45.4 MB; NVIDIA 75 MB"},
	{group: "memory", label: "plugin RSS, idle, anonymous only (heap, stacks; both Go runtimes: the plugin's and the simulated NVML's)", bench: "BenchmarkDRASock/plugin-memory", name: "rss-anon-idle-MiB", unit: "MiB"},
	{group: "memory", label: "plugin PSS, idle, file-backed (binary and libraries)", bench: "BenchmarkDRASock/plugin-memory", name: "pss-file-idle-MiB", unit: "MiB"},
	{group: "memory", label: "plugin RSS, idle, the simulated libnvidia-ml's mapped pages (a real node maps NVIDIA's C library instead)", bench: "BenchmarkDRASock/plugin-memory", name: "rss-nvml-lib-idle-MiB", unit: "MiB"},
	{group: "memory", label: "what the simulated libnvidia-ml adds to an idle process (loaded and initialised alone: its mapped pages and its own Go runtime)", bench: "BenchmarkDRASock/plugin-memory", name: "rss-nvml-sim-MiB", unit: "MiB"},
	{group: "memory", label: "plugin RSS, idle, less what the simulated libnvidia-ml adds (a node's C library has its own pages instead, not measured)", bench: "BenchmarkDRASock/plugin-memory", name: "rss-idle-less-nvml-sim-MiB", unit: "MiB"},
	{group: "memory", label: "plugin RSS, peak (after the dra.sock load)", bench: "BenchmarkDRASock/plugin-memory", name: "rss-peak-MiB", unit: "MiB"},
	{group: "memory", label: "controller RSS, idle", bench: "BenchmarkControllerMemory", name: "rss-idle-MiB", unit: "MiB"},
	{group: "memory", label: "controller RSS, peak (after 200 webhook reviews)", bench: "BenchmarkControllerMemory", name: "rss-peak-MiB", unit: "MiB"},
	{group: "scale", label: "kube-scheduler, 120 nodes' slices as the plugin writes them, whole GPUs: pods scheduled/s", bench: "BenchmarkSchedulerScale/whole-gpus", name: "pods-scheduled/s", unit: "pods/s"},
	{group: "scale", label: "kube-scheduler, whole GPUs: 800 claims allocated after", bench: "BenchmarkSchedulerScale/whole-gpus", name: "total-ms", unit: "ms"},
	{group: "scale", label: "kube-scheduler, dynamic-MIG partitions: pods scheduled/s", bench: "BenchmarkSchedulerScale/dynamic-mig", name: "pods-scheduled/s", unit: "pods/s"},
	{group: "scale", label: "kube-scheduler, dynamic-MIG partitions: 800 claims allocated after", bench: "BenchmarkSchedulerScale/dynamic-mig", name: "total-ms", unit: "ms"},
	{group: "scale", label: "structured allocator in-process, whole GPUs", bench: "BenchmarkSchedulerAllocation/whole-gpus", name: "claims/s", unit: "claims/s"},
	{group: "scale", label: "structured allocator in-process, dynamic MIG (all profiles)", bench: "BenchmarkSchedulerAllocation/dynamic-mig", name: "claims/s", unit: "claims/s"},
	{group: "scale", label: "structured allocator in-process, dynamic MIG (--mig-profiles 1g.10gb,3g.40gb)", bench: "BenchmarkSchedulerAllocation/dynamic-mig-2-profiles", name: "claims/s", unit: "claims/s"},
	{group: "in-process", label: "prepare+unprepare, 1-GPU claim, p99", bench: "BenchmarkPrepareUnprepare/1gpu", name: "p99-µs", unit: "µs"},
	{group: "in-process", label: "8 independent callers", bench: "BenchmarkParallelCallers", name: "cycles/s", unit: "cycles/s"},
}

// Build computes the report rows from results.
func Build(res Results) []Row {
	rows := make([]Row, 0, len(metrics))
	for _, m := range metrics {
		row := Row{Group: m.group, Label: m.label, Unit: m.unit, Reference: m.reference}
		var v float64
		var ok bool
		if m.ratio != nil {
			a, okA := res[m.ratio[0][0]][m.ratio[0][1]]
			b, okB := res[m.ratio[1][0]][m.ratio[1][1]]
			if ok = okA && okB && b != 0; ok {
				v = a / b
			}
		} else {
			v, ok = res[m.bench][m.name]
		}
		if ok {
			row.Value = &v
		}
		switch {
		case m.atMost != 0:
			row.Target = "≤ " + format(m.atMost)
			if ok {
				met := v <= m.atMost
				row.Met = &met
			}
		case m.atLeast != 0:
			row.Target = "≥ " + format(m.atLeast)
			if ok {
				met := v >= m.atLeast
				row.Met = &met
			}
		}
		rows = append(rows, row)
	}
	return rows
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// Report is the whole report as written to report.json.
type Report struct {
	Machine    map[string]string `json:"machine"`
	SideBySide []SideRow         `json:"sideBySide"`
	Rows       []Row             `json:"rows"`
	Raw        Results           `json:"raw"`
}

// WriteJSON writes r as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes r as a Markdown document with one table per group.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# gpudra performance report\n\n")
	for _, k := range []string{"date", "commit", "cpu", "cpus", "memory", "filesystem", "cdi", "reference", "load before", "load after"} {
		if v, ok := r.Machine[k]; ok && v != "" {
			fmt.Fprintf(&b, "- %s: %s\n", k, v)
		}
	}
	if r.SideBySide != nil {
		writeSideBySide(&b, r.SideBySide, false)
	}
	writeBreakdown(&b, r.Raw)
	group := ""
	for _, row := range r.Rows {
		if row.Group != group {
			group = row.Group
			fmt.Fprintf(&b, "\n## %s\n\n| figure | value | target | met | reference drivers (shipped / QPS lifted) |\n|---|---|---|---|---|\n", group)
		}
		value := "not run"
		if row.Value != nil {
			value = format(*row.Value) + " " + row.Unit
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.Label, value, row.Target, metString(row.Met), row.Reference)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
