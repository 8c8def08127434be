package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
BenchmarkDRASock/1-gpu-claim-2         	     200	   2976118 ns/op	         8.866 prepare-max-ms	         2.135 prepare-p50-ms	         2.936 prepare-p90-ms	         7.155 prepare-p99-ms
BenchmarkDRASock/8-parallel-callers-2  	     200	   5477174 ns/op	       782.6 cycles/s
BenchmarkPodCreateToRunning/without-claim-2   50  1 ns/op  340 p50-ms  352 p99-ms
BenchmarkPodCreateToRunning/with-claim-2      50  1 ns/op  370 p50-ms  390 p99-ms
PASS
ok  	github.com/gpudra/gpudra/test/e2e	9.940s
`

func TestParseAndBuild(t *testing.T) {
	res := Results{}
	require.NoError(t, Parse(strings.NewReader(sample), res))
	require.InDelta(t, 7.155, res["BenchmarkDRASock/1-gpu-claim"]["prepare-p99-ms"], 1e-9)
	require.InDelta(t, 782.6, res["BenchmarkDRASock/8-parallel-callers"]["cycles/s"], 1e-9)

	rows := map[string]Row{}
	for _, r := range Build(res) {
		rows[r.Label] = r
	}
	p99 := rows["1-GPU claim: prepare p99"]
	require.False(t, *p99.Met, "7.155 ms misses ≤ 5 ms")
	require.True(t, *rows["8 parallel callers, 1-GPU claims"].Met)
	ratio := rows["ratio with / without claim (p50)"]
	require.InDelta(t, 370.0/340.0, *ratio.Value, 1e-9)
	require.False(t, *ratio.Met, "1.05 < ratio")
	require.Nil(t, rows["plugin RSS, idle"].Value, "not run")
	require.Nil(t, rows["plugin RSS, idle"].Met)

	var md, js bytes.Buffer
	r := Report{Machine: map[string]string{"cpus": "2"}, Rows: Build(res), Raw: res}
	require.NoError(t, r.WriteMarkdown(&md))
	require.NoError(t, r.WriteJSON(&js))
	require.Contains(t, md.String(), "| 1-GPU claim: prepare p99 | 7.16 ms | ≤ 5.00 | **no** |")
	require.Contains(t, md.String(), "| plugin RSS, idle | not run | ≤ 40.0 |")
	require.Contains(t, js.String(), `"cpus": "2"`)
}

func TestParseRejectsGarbledValues(t *testing.T) {
	require.Error(t, Parse(strings.NewReader("BenchmarkX-2  10  abc ns/op\n"), Results{}))
}

func TestSideBySide(t *testing.T) {
	for _, tc := range []struct {
		name, input, figure string
		want                SideRow
	}{
		{"a prepare's target is on its p99", "BenchmarkDRASock/1-gpu-claim-2 200 1 ns/op 2.1 prepare-p50-ms 4.9 prepare-p99-ms\n",
			"prepare, 1 claim (ms, p50 / p99)", SideRow{Gpudra: "2.10 / 4.90", Target: "p99 ≤ 5.00", Met: ptr(true)}},
		{"a p99 above it misses", "BenchmarkDRASock/1-gpu-claim-2 200 1 ns/op 2.1 prepare-p50-ms 5.2 prepare-p99-ms\n",
			"prepare, 1 claim (ms, p50 / p99)", SideRow{Gpudra: "2.10 / 5.20", Target: "p99 ≤ 5.00", Met: ptr(false)}},
		{"8 claims: the target is on the p50", "BenchmarkDRASock/8-claims-one-call-2 200 1 ns/op 9.5 prepare-p50-ms 30 prepare-p99-ms\n",
			"8 claims in one call (ms, p50 / p99)", SideRow{Gpudra: "9.50 / 30.0", Target: "≤ 10.0", Met: ptr(true)}},
		{"cycles per second", "BenchmarkDRASock/8-parallel-callers-2 200 1 ns/op 612 cycles/s\n",
			"8 parallel callers (prepare+unprepare/s)", SideRow{Gpudra: "612", Target: "≥ 600", Met: ptr(true)}},
		{"a ratio", "BenchmarkPodCreateToRunning/with-claim-2 50 1 ns/op 360 p50-ms\nBenchmarkPodCreateToRunning/without-claim-2 50 1 ns/op 340 p50-ms\n",
			"pod create→Running, with a claim vs without (p50 ratio)", SideRow{Gpudra: "1.059"}},
		{"not run", "", "idle RSS (MiB; reference: MB as quoted)", SideRow{Target: "≤ 40.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Results{}
			require.NoError(t, Parse(strings.NewReader(tc.input), res))
			var got SideRow
			for _, r := range BuildSideBySide(res) {
				if r.Figure == tc.figure {
					got = r
				}
			}
			require.Equal(t, tc.figure, got.Figure)
			require.NotEmpty(t, got.Shipped, "reference figure quoted")
			require.Equal(t, tc.want.Gpudra, got.Gpudra)
			require.Equal(t, tc.want.Target, got.Target)
			require.Equal(t, tc.want.Met, got.Met)
		})
	}
}

func TestBreakdownInMarkdown(t *testing.T) {
	res := Results{}
	require.NoError(t, Parse(strings.NewReader("BenchmarkDRASock/1-gpu-claim-2 200 1 ns/op 1.5 cpu-plugin-ms/cycle 0.9 cpu-kube-apiserver-ms/cycle "+
		"900 prepare-record_completed-µs 2500 prepare-record_completed-p99≤µs 40 prepare-plan-µs 100 prepare-plan-p99≤µs 800 claim-read-µs\n"), res))
	var md bytes.Buffer
	require.NoError(t, Report{Raw: res, SideBySide: BuildSideBySide(res)}.WriteMarkdown(&md))
	out := md.String()
	require.Contains(t, out, "| 1-gpu-claim | 1.50 | 0.90 |")
	require.Contains(t, out, "| prepare-record_completed | 900 / ≤2500 |")
	require.Less(t, strings.Index(out, "| claim-read |"), strings.Index(out, "| prepare-plan |"), "in the order of a call")
	require.Less(t, strings.Index(out, "| prepare-plan |"), strings.Index(out, "| prepare-record_completed |"))
	require.Contains(t, out, "quoted from issue 14")
}

func ptr[T any](v T) *T { return &v }

func TestDocsPage(t *testing.T) {
	res := Results{}
	require.NoError(t, Parse(strings.NewReader(sample), res))
	r := Report{Machine: map[string]string{"date": "2026-11-24", "cpu": "AMD EPYC", "cpus": "2", "commit": "abc1234",
		"load before": "1.0 1.0 1.0", "go": "go1.26.8", "note": "A note."}, SideBySide: BuildSideBySide(res), Rows: Build(res), Raw: res}
	var md bytes.Buffer
	require.NoError(t, r.WriteDocs(&md))
	page := md.String()
	require.True(t, strings.HasPrefix(page, DocsHeader+"\n"))
	require.Contains(t, page, "Generated by `make bench-report` on 2026-11-24.")
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, "|") && !strings.HasPrefix(line, "<!--") {
			require.LessOrEqual(t, len(line), 120, "prose is wrapped: %q", line)
		}
	}
	require.Contains(t, page, "| CPU | AMD EPYC |\n| cores | 2 |\n| Go | go1.26.8 |\n")
	require.Contains(t, page, "\nA note.\n")
	require.NotContains(t, page, "abc1234", "no commit in the docs page")
	require.NotContains(t, page, "1.0 1.0 1.0", "no load average in the docs page")
	require.Contains(t, page, "| 1-GPU claim: prepare p99 | 7.16 ms | ≤ 5.00 | **no** |")
	require.NotContains(t, page, "not run |", "figures that did not run are left out of the tables")
	require.Contains(t, page, "\nNot in this run: start-up, memory, scale, in-process.\n")
}

// With the reference driver in the same run (REFERENCE_PLUGIN), each
// dra.sock figure gets its counterpart and whether gpudra is behind it: on
// the p50 or, where there is one, the p99.
func TestSideBySideWithReference(t *testing.T) {
	res := Results{}
	require.NoError(t, Parse(strings.NewReader(
		"BenchmarkDRASock/1-gpu-claim-2 200 1 ns/op 2.1 prepare-p50-ms 6.0 prepare-p99-ms\n"+
			"BenchmarkDRASock/reference-1-gpu-claim-2 200 1 ns/op 3.0 prepare-p50-ms 5.5 prepare-p99-ms\n"+
			"BenchmarkDRASock/8-parallel-callers-2 200 1 ns/op 400 cycles/s\n"+
			"BenchmarkDRASock/reference-8-parallel-callers-2 200 1 ns/op 300 cycles/s\n"+
			"BenchmarkDRASock/8-claims-one-call-2 200 1 ns/op 9.5 prepare-p50-ms 30 prepare-p99-ms\n"+
			"BenchmarkDRASock/8-gpu-claim-2 200 1 ns/op 6.3 prepare-p50-ms 9.0 prepare-p99-ms\n"+
			"BenchmarkDRASock/reference-8-gpu-claim-2 200 1 ns/op 4.3 prepare-p50-ms 9.1 prepare-p99-ms\n"+
			"BenchmarkDRASock/plugin-memory-2 1 1 ns/op 47.0 rss-idle-MiB 11.0 rss-nvml-sim-MiB 36.0 rss-idle-less-nvml-sim-MiB\n"+
			"BenchmarkDRASock/reference-plugin-memory-2 1 1 ns/op 42.0 rss-idle-MiB 42.0 rss-idle-less-nvml-sim-MiB\n"), res))
	rows := map[string]SideRow{}
	for _, r := range BuildSideBySide(res) {
		rows[r.Figure] = r
	}
	one := rows["prepare, 1 claim (ms, p50 / p99)"]
	require.Equal(t, "3.00 / 5.50", one.Measured)
	require.Equal(t, ptr(true), one.Behind, "the target is on the p99: 6.0 behind 5.5, although the p50 leads")
	gpus := rows["prepare, 8-GPU claim (ms, p50 / p99)"]
	require.Equal(t, "6.30 / 9.00", gpus.Gpudra)
	require.Equal(t, "4.30 / 9.10", gpus.Measured)
	require.Equal(t, ptr(true), gpus.Behind, "behind on the p50 is behind, although the p99 leads")
	require.Nil(t, gpus.Met, "no target")
	par := rows["8 parallel callers (prepare+unprepare/s)"]
	require.Equal(t, "300", par.Measured)
	require.Equal(t, ptr(false), par.Behind, "more cycles per second is ahead")
	rss := rows["idle RSS (MiB; reference: MB as quoted)"]
	require.Equal(t, ptr(true), rss.Behind, "47.0 MiB as measured, with the simulated NVML library")
	require.Equal(t, ptr(false), rss.Met)
	less := rows["idle RSS less what the simulated libnvidia-ml adds (MiB)"]
	require.Equal(t, "36.0", less.Gpudra)
	require.Equal(t, "42.0", less.Measured)
	require.Equal(t, ptr(false), less.Behind, "without the simulated library: ahead")
	require.Nil(t, less.Met, "no target of its own: the 40 MiB target is on the figure as measured")
	eight := rows["8 claims in one call (ms, p50 / p99)"]
	require.Empty(t, eight.Measured, "no reference case in this run")
	require.Nil(t, eight.Behind)
	var md strings.Builder
	r := Report{Raw: res, SideBySide: BuildSideBySide(res), Machine: map[string]string{"reference": "/tmp/ref (dra-example-driver 31914ce)", "cpus": ""}}
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "- reference: /tmp/ref (dra-example-driver 31914ce)\n")
	require.NotContains(t, md.String(), "- cpus:", "an empty fact is left out")
	var docs strings.Builder
	require.NoError(t, r.WriteDocs(&docs))
	require.Contains(t, docs.String(), "| reference driver, same run | /tmp/ref (dra-example-driver 31914ce) |")
	require.Contains(t, md.String(), "| dra-example-driver, same run | gpudra behind it |")
	require.Contains(t, md.String(), "| prepare, 1 claim (ms, p50 / p99) | 2.10 / 6.00 | p99 ≤ 5.00 | **no** | 3.00 / 5.50 | **yes** |")
}
