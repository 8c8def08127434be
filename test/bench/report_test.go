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
	require.False(t, *p99.Met, "7.155 ms misses ≤ 3 ms")
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
	require.Contains(t, md.String(), "| 1-GPU claim: prepare p99 | 7.16 ms | ≤ 3.00 | **no** |")
	require.Contains(t, md.String(), "| plugin RSS, idle | not run | ≤ 40.0 |")
	require.Contains(t, js.String(), `"cpus": "2"`)
}

func TestParseRejectsGarbledValues(t *testing.T) {
	require.Error(t, Parse(strings.NewReader("BenchmarkX-2  10  abc ns/op\n"), Results{}))
}
