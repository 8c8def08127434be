package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The reference driver's figures of issue 14 are quoted: the Go module proxy
// answers 403 for sigs.k8s.io/dra-example-driver, so the development
// machine builds it only from a source snapshot. They were measured by the
// same method on the same machine (a local cluster with Kubernetes v1.37.1
// and a real kubelet, 2 cores, claims over dra.sock allocated in the API
// server), as shipped and with client-go's rate limit lifted (one flag),
// and quoted from issue 14 (November 2026). Given a binary
// (REFERENCE_PLUGIN), make bench-report measures it in the same run too
// (SideRow.Measured).
const referenceSource = "dra-example-driver, shipped and rate limit lifted: quoted from issue 14 (November 2026, same machine and method)"

// SideRow is one line of the side-by-side table.
type SideRow struct {
	Figure string `json:"figure"`
	// Gpudra is the measured figure, formatted ("" when not run).
	Gpudra string `json:"gpudra"`
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	// Shipped and Lifted are the reference driver's figures as shipped and
	// with its client rate limit lifted (quoted, see referenceSource).
	Shipped string `json:"exampleShipped"`
	Lifted  string `json:"exampleLifted"`
	// Measured is the reference driver's figure from the same run
	// (REFERENCE_PLUGIN, test/e2e/drasock_reference_test.go): "" when it
	// did not run or the figure has no reference case. Behind tells
	// whether gpudra's figure is worse than it (on the target's p50 or p99).
	Measured string `json:"exampleMeasured,omitempty"`
	Behind   *bool  `json:"behindReference,omitempty"`
}

// reference is the reference driver's counterpart of a dra.sock figure
// (the sub-benchmark reference-<case>); the zero value for other figures.
func (v value) reference() value {
	if c, ok := strings.CutPrefix(v.bench, "BenchmarkDRASock/"); ok {
		return value{"BenchmarkDRASock/" + "reference-" + c, v.name}
	}
	return value{}
}

// value is a figure of res: a metric, or nothing.
type value struct{ bench, name string }

func (v value) of(res Results) (float64, bool) {
	x, ok := res[v.bench][v.name]
	return x, ok
}

var sideBySide = []struct {
	figure          string
	p50, p99        value // p99 optional
	ratioOf         *[2]value
	unit            string
	atMost, atLeast float64
	targetOn99      bool // the target applies to the p99
	shipped, lifted string
}{
	{figure: "prepare, 1 claim (ms, p50 / p99)", p50: value{"BenchmarkDRASock/1-gpu-claim", "prepare-p50-ms"},
		p99: value{"BenchmarkDRASock/1-gpu-claim", "prepare-p99-ms"}, atMost: 5, targetOn99: true,
		shipped: "198.6 / 200.8", lifted: "3.95 / 6.7"},
	{figure: "prepare, 8-GPU claim (ms, p50 / p99)", p50: value{"BenchmarkDRASock/8-gpu-claim", "prepare-p50-ms"},
		p99: value{"BenchmarkDRASock/8-gpu-claim", "prepare-p99-ms"}},
	{figure: "8 claims in one call (ms, p50 / p99)", p50: value{"BenchmarkDRASock/8-claims-one-call", "prepare-p50-ms"},
		p99: value{"BenchmarkDRASock/8-claims-one-call", "prepare-p99-ms"}, atMost: 10,
		shipped: "1 592", lifted: "25.3 / 54.5"},
	{figure: "8 parallel callers (prepare+unprepare/s)", p50: value{"BenchmarkDRASock/8-parallel-callers", "cycles/s"},
		atLeast: 600, shipped: "5.0", lifted: "323"},
	{figure: "pod create→Running, with a claim vs without (p50 ratio)", ratioOf: &[2]value{
		{"BenchmarkPodCreateToRunning/with-claim", "p50-ms"}, {"BenchmarkPodCreateToRunning/without-claim", "p50-ms"}},
		shipped: "1.090", lifted: "1.090"},
	{figure: "plugin start → ResourceSlice (ms, median)", p50: value{"BenchmarkPluginStartup", "start-to-slice-ms"},
		atMost: 500, shipped: "1 031", lifted: "1 045"},
	{figure: "idle RSS (MiB; reference: MB as quoted)", p50: value{"BenchmarkDRASock/plugin-memory", "rss-idle-MiB"},
		atMost: 40, shipped: "45.4 MB", lifted: "45.2 MB"},
	{figure: "idle RSS less what the simulated libnvidia-ml adds (MiB)", p50: value{"BenchmarkDRASock/plugin-memory", "rss-idle-less-nvml-sim-MiB"}},
}

// BuildSideBySide fills the side-by-side table from res.
func BuildSideBySide(res Results) []SideRow {
	rows := make([]SideRow, 0, len(sideBySide))
	for _, s := range sideBySide {
		row := SideRow{Figure: s.figure, Shipped: s.shipped, Lifted: s.lifted}
		var p50, p99 float64
		var checked float64 // the figure the target is on
		ok, has99 := false, false
		if s.ratioOf != nil {
			a, okA := s.ratioOf[0].of(res)
			b, okB := s.ratioOf[1].of(res)
			if ok = okA && okB && b != 0; ok {
				checked = a / b
				row.Gpudra = fmt.Sprintf("%.3f", checked)
			}
		} else if p50, ok = s.p50.of(res); ok {
			checked = p50
			row.Gpudra = format(p50)
			if p99, has99 = s.p99.of(res); has99 {
				row.Gpudra += " / " + format(p99)
				if s.targetOn99 {
					checked = p99
				}
			}
		}
		if ok && s.ratioOf == nil {
			if r, okR := s.p50.reference().of(res); okR {
				row.Measured = format(r)
				// Behind on either figure of a p50 / p99 pair is behind.
				behind := p50 > r
				if s.atLeast != 0 {
					behind = p50 < r
				}
				if r99, ok99 := s.p99.reference().of(res); ok99 {
					row.Measured += " / " + format(r99)
					if has99 && p99 > r99 {
						behind = true
					}
				}
				row.Behind = &behind
			}
		}
		switch {
		case s.atMost != 0:
			row.Target = "≤ " + format(s.atMost)
			if s.targetOn99 {
				row.Target = "p99 " + row.Target
			}
			if ok {
				met := checked <= s.atMost
				row.Met = &met
			}
		case s.atLeast != 0:
			row.Target = "≥ " + format(s.atLeast)
			if ok {
				met := checked >= s.atLeast
				row.Met = &met
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// writeSideBySide writes the table; omitNotRun leaves out figures that were not measured.
func writeSideBySide(b *strings.Builder, rows []SideRow, omitNotRun bool) {
	measured := slices.ContainsFunc(rows, func(r SideRow) bool { return r.Measured != "" })
	b.WriteString("\n## Side by side\n\n| figure | gpudra | target | met |")
	if measured {
		b.WriteString(" dra-example-driver, same run | gpudra behind it |")
	}
	b.WriteString(" dra-example-driver, shipped | dra-example-driver, rate limit lifted |\n|---|---|---|---|---|---|")
	if measured {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		v := r.Gpudra
		if v == "" {
			if omitNotRun {
				continue
			}
			v = "not run"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |", r.Figure, v, r.Target, metString(r.Met))
		if measured {
			behind := ""
			if r.Behind != nil {
				behind = map[bool]string{true: "**yes**", false: "no"}[*r.Behind]
			}
			fmt.Fprintf(b, " %s | %s |", r.Measured, behind)
		}
		fmt.Fprintf(b, " %s | %s |\n", r.Shipped, r.Lifted)
	}
	if measured {
		fmt.Fprintf(b, "\n%s\n", wrap(measuredSource))
	}
	fmt.Fprintf(b, "\n%s\n", wrap(referenceSource+"."))
}

// measuredSource says what the same-run column is.
const measuredSource = "dra-example-driver, same run: its kubelet plugin (REFERENCE_PLUGIN, built from " +
	"kubernetes-sigs/dra-example-driver's source; the report's machine table names it) started beside gpudra's " +
	"by BenchmarkDRASock against the same API server, with its client rate limit lifted (--kube-api-qps=-1), " +
	"8 simulated devices, each case run in blocks alternating with gpudra's (10 of each; 2 for the parallel callers). Its idle RSS has no simulated NVML library to map."

func metString(met *bool) string {
	if met == nil {
		return ""
	}
	return map[bool]string{true: "yes", false: "**no**"}[*met]
}

// dra.sock cases whose breakdown the report shows.
var breakdownCases = []string{"1-gpu-claim", "8-gpu-claim", "8-claims-one-call", "8-parallel-callers"}

// writeBreakdown writes where a dra.sock call's time and the machine's CPU
// go: the plugin's phases (mean and the bound of the bucket holding the
// p99), the claim read, and CPU per prepare+unprepare cycle by process.
func writeBreakdown(b *strings.Builder, res Results) {
	if _, ok := res["BenchmarkDRASock/1-gpu-claim"]; !ok {
		return
	}
	b.WriteString("\n## Where the time goes (dra.sock)\n")
	var cpuRows []string
	for _, c := range breakdownCases {
		m := res["BenchmarkDRASock/"+c]
		if _, ok := m["cpu-plugin-ms/cycle"]; !ok {
			continue
		}
		cpuRows = append(cpuRows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |\n", c, f2(m, "cpu-plugin-ms/cycle"), f2(m, "cpu-kube-apiserver-ms/cycle"),
			f2(m, "cpu-etcd-ms/cycle"), f2(m, "cpu-bench-ms/cycle"), f2(m, "cpu-other-ms/cycle"), f2(m, "status-writes/claim-cycle")))
	}
	if len(cpuRows) > 0 {
		b.WriteString("\nCPU per prepare+unprepare cycle (ms) by process; the API server, etcd and the plugin share the machine's cores:\n\n" +
			"| case | plugin | kube-apiserver | etcd | benchmark client | rest of the machine | status writes per claim cycle |\n|---|---|---|---|---|---|---|\n")
		b.WriteString(strings.Join(cpuRows, ""))
	}
	phases := breakdownRows(res)
	if len(phases) == 0 {
		b.WriteString("\nThis run recorded no CPU or phase breakdown.\n")
		return
	}
	b.WriteString("\nPhases of one claim's prepare and unprepare inside the plugin (µs, mean / upper bound of the bucket holding the p99), " +
		"the claim read from the API server and the whole call as the plugin serves it:\n\n| phase | ")
	b.WriteString(strings.Join(breakdownCases, " | ") + " |\n|---|" + strings.Repeat("---|", len(breakdownCases)) + "\n")
	for _, row := range phases {
		fmt.Fprintf(b, "| %s |", row)
		for _, c := range breakdownCases {
			m := res["BenchmarkDRASock/"+c]
			mean, ok := m[row+"-µs"]
			if !ok {
				b.WriteString(" |")
				continue
			}
			if p99, ok := m[row+"-p99≤µs"]; ok {
				fmt.Fprintf(b, " %s / ≤%s |", format(mean), format(p99))
			} else {
				fmt.Fprintf(b, " %s |", format(mean))
			}
		}
		b.WriteString("\n")
	}
	if m := res["BenchmarkDRASock/plugin-memory"]; m["fs-create-remove-µs"] != 0 {
		fmt.Fprintf(b, "\nCreating and removing one small file in the plugin's directory: %s µs (the plugin does that about five times per cycle).\n",
			f2(m, "fs-create-remove-µs"))
	}
}

// phaseOrder is the order of a call's steps (the plugin's phase names,
// internal/plugin/prepare); phases not listed follow, sorted.
var phaseOrder = []string{"claim-read", "served-NodePrepareResources",
	"prepare-plan", "prepare-lock_claim", "prepare-lock_devices", "prepare-checkpoint_read", "prepare-conflict_check",
	"prepare-record_started", "prepare-holders", "prepare-mig", "prepare-sharing", "prepare-cdi", "prepare-record_completed",
	"prepare-unlock", "served-NodeUnprepareResources", "unprepare-lock_claim", "unprepare-checkpoint_read",
	"unprepare-lock_devices", "unprepare-cdi", "unprepare-sharing", "unprepare-mig", "unprepare-holders", "unprepare-unlock"}

// breakdownRows are the phase metrics present, in phaseOrder.
func breakdownRows(res Results) []string {
	seen := map[string]bool{}
	for _, c := range breakdownCases {
		for k := range res["BenchmarkDRASock/"+c] {
			if name, ok := strings.CutSuffix(k, "-µs"); ok && !strings.HasSuffix(name, "-p99≤") &&
				(strings.HasPrefix(name, "prepare-") || strings.HasPrefix(name, "unprepare-") ||
					strings.HasPrefix(name, "served-") || name == "claim-read") {
				seen[name] = true
			}
		}
	}
	var rows, rest []string
	for _, k := range phaseOrder {
		if seen[k] {
			rows = append(rows, k)
			delete(seen, k)
		}
	}
	for k := range seen {
		rest = append(rest, k)
	}
	slices.Sort(rest)
	return append(rows, rest...)
}

func f2(m map[string]float64, k string) string {
	if v, ok := m[k]; ok {
		return format(v)
	}
	return ""
}
