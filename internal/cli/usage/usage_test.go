package usage

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const metrics = `# TYPE gpudra_gpu_utilization_ratio gauge
gpudra_gpu_utilization_ratio{claim_name="c1",claim_namespace="ml",device="gpu-0",mig_profile="",node="n1",pod_name="train",pod_namespace="ml",uuid="GPU-0"} 0.8
gpudra_gpu_utilization_ratio{claim_name="c1",claim_namespace="ml",device="gpu-1",mig_profile="",node="n1",pod_name="train",pod_namespace="ml",uuid="GPU-1"} 0.4
gpudra_gpu_utilization_ratio{claim_name="s",claim_namespace="ml",device="gpu-2",mig_profile="",node="n1",pod_name="a",pod_namespace="ml",uuid="GPU-2"} 0.7
gpudra_gpu_utilization_ratio{claim_name="s",claim_namespace="ml",device="gpu-2",mig_profile="",node="n1",pod_name="b",pod_namespace="ml",uuid="GPU-2"} 0.7
gpudra_gpu_utilization_ratio{claim_name="",claim_namespace="",device="gpu-3",mig_profile="",node="n1",pod_name="",pod_namespace="",uuid="GPU-3"} 0
# TYPE gpudra_gpu_memory_used_bytes gauge
gpudra_gpu_memory_used_bytes{claim_name="c1",claim_namespace="ml",device="gpu-0",mig_profile="",node="n1",pod_name="train",pod_namespace="ml",uuid="GPU-0"} 2e+09
gpudra_gpu_memory_used_bytes{claim_name="c1",claim_namespace="ml",device="gpu-1",mig_profile="",node="n1",pod_name="train",pod_namespace="ml",uuid="GPU-1"} 1e+09
gpudra_gpu_memory_used_bytes{claim_name="s",claim_namespace="ml",device="gpu-2",mig_profile="",node="n1",pod_name="a",pod_namespace="ml",uuid="GPU-2"} 5e+08
gpudra_gpu_memory_used_bytes{claim_name="s",claim_namespace="ml",device="gpu-2",mig_profile="",node="n1",pod_name="b",pod_namespace="ml",uuid="GPU-2"} 5e+08
gpudra_gpu_memory_used_bytes{claim_name="",claim_namespace="",device="gpu-3",mig_profile="",node="n1",pod_name="",pod_namespace="",uuid="GPU-3"} 0
`

func TestParseSamples(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    []Sample
		wantErr string
	}{
		{"pods with one GPU, two GPUs, a shared GPU; a free GPU left out", metrics, []Sample{
			{Pod: "ml/a", Node: "n1", Devices: []string{"gpu-2"}, Utilization: 0.7, MemoryUsed: 5e8},
			{Pod: "ml/b", Node: "n1", Devices: []string{"gpu-2"}, Utilization: 0.7, MemoryUsed: 5e8},
			{Pod: "ml/train", Node: "n1", Devices: []string{"gpu-0", "gpu-1"}, Utilization: 0.6000000000000001, MemoryUsed: 3e9},
		}, ""},
		{"no telemetry (turned off)", "# TYPE gpudra_plugin_prepare_total counter\ngpudra_plugin_prepare_total 3\n", []Sample{}, ""},
		{"not the text format", "gpudra_gpu_utilization_ratio{", nil, "parse the metrics of node n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSamples("n1", strings.NewReader(tt.body))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestHistorySegments(t *testing.T) {
	start := time.Unix(1000, 0)
	h := NewHistory(start)
	a := Sample{Pod: "ns/a", Node: "n1", Utilization: 0.5}
	b := Sample{Pod: "ns/b", Node: "n2", Utilization: 0.9}
	for i, samples := range [][]Sample{{a}, {a, b}, {b}, {a, b}, {a}} {
		h.Add(start.Add(time.Duration(i)*10*time.Second), samples)
	}
	require.Len(t, h.Series, 2)
	assert.Equal(t, "ns/a", h.Series[0].Pod)
	segs := h.Series[0].Segments()
	require.Len(t, segs, 2, "ns/a was missing from the third sample")
	assert.Len(t, segs[0], 2)
	assert.Equal(t, 30*time.Second, segs[1][0].T)
	assert.Len(t, h.Series[1].Segments(), 1, "ns/b ran from the second sample to the fourth")
}

// TestRecord runs in a synctest bubble: its clock moves only when every
// goroutine waits, so how many samples a 30 ms recording takes does not
// depend on how loaded the machine is (a loaded CI machine once took one).
func TestRecord(t *testing.T) {
	synctest.Test(t, testRecord)
}

func testRecord(t *testing.T) {
	calls := 0
	read := func(context.Context) (map[string][]byte, map[string]error, error) {
		calls++
		return map[string][]byte{"n1": []byte(metrics)}, map[string]error{"n2": errors.New("forbidden")}, nil
	}
	var log bytes.Buffer
	h, err := Record(context.Background(), read, Options{Interval: 10 * time.Millisecond, Duration: 30 * time.Millisecond,
		Keep: func(s Sample) bool { return s.Pod != "ml/b" }, Log: &log})
	require.NoError(t, err)
	assert.Equal(t, 4, calls, "samples at 0, 10, 20 and 30 ms")
	assert.Equal(t, calls, h.Samples)
	require.Len(t, h.Series, 2, "ml/b is filtered out")
	assert.Contains(t, log.String(), "2 pods using GPUs: ml/a 70%, ml/train 60%")
	assert.Contains(t, log.String(), "node n2 not read: forbidden")

	_, err = Record(context.Background(), read, Options{Interval: 0, Duration: time.Second})
	assert.ErrorContains(t, err, "interval must be positive")
	// A reader that gives no error map, and a node whose metrics do not parse.
	unparsable := func(context.Context) (map[string][]byte, map[string]error, error) {
		return map[string][]byte{"n3": []byte("gpudra_gpu_utilization_ratio{")}, nil, nil
	}
	log.Reset()
	_, err = Record(context.Background(), unparsable, Options{Interval: time.Millisecond, Duration: 0, Log: &log})
	require.NoError(t, err)
	assert.Contains(t, log.String(), "node n3 not read: parse the metrics of node n3")
	failing := func(context.Context) (map[string][]byte, map[string]error, error) {
		return nil, nil, errors.New("no API")
	}
	_, err = Record(context.Background(), failing, Options{Interval: time.Second, Duration: time.Second})
	assert.ErrorContains(t, err, "no API")
}

func TestRender(t *testing.T) {
	start := time.Unix(1000, 0)
	h := NewHistory(start)
	for i := 0; i < 6; i++ {
		s := []Sample{{Pod: "ns/a", Node: "n1", Utilization: 0.5 + 0.05*float64(i), MemoryUsed: 3 << 30}}
		if i != 3 {
			s = append(s, Sample{Pod: "ns/b", Node: "n1", Utilization: 0.8, MemoryUsed: 5 << 30})
		}
		h.Add(start.Add(time.Duration(i)*10*time.Second), s)
	}
	for _, hist := range []*History{h, NewHistory(start)} {
		var out bytes.Buffer
		require.NoError(t, Render(hist, "GPU use per pod", &out))
		img, err := png.Decode(&out)
		require.NoError(t, err)
		assert.Equal(t, 960, img.Bounds().Dx(), "10 in at 96 dpi")
		assert.Equal(t, 672, img.Bounds().Dy())
	}
}
