package usage

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Point is one sample of a pod, at T since the recording started.
type Point struct {
	T           time.Duration
	Utilization float64 // 0–1
	MemoryUsed  float64 // bytes
}

// Series is what one pod used, sample by sample. A pod missing from a
// sample (not started yet, or gone) has a gap there: Segments splits at
// gaps.
type Series struct {
	Pod     string
	Node    string
	Devices []string
	Points  []Point
	// samples holds the index of the recording's sample of each point.
	samples []int
}

// Segments returns the runs of points taken in consecutive samples.
func (s *Series) Segments() [][]Point {
	var out [][]Point
	for i := range s.Points {
		if i == 0 || s.samples[i] != s.samples[i-1]+1 {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], s.Points[i])
	}
	return out
}

// History is a recording: every pod seen, in pod order.
type History struct {
	Start   time.Time
	Samples int
	Series  []*Series
	byPod   map[string]*Series
}

// NewHistory starts a recording at start.
func NewHistory(start time.Time) *History {
	return &History{Start: start, byPod: map[string]*Series{}}
}

// Add records one scrape of every node, taken at at.
func (h *History) Add(at time.Time, samples []Sample) {
	for _, smp := range samples {
		s := h.byPod[smp.Pod]
		if s == nil {
			s = &Series{Pod: smp.Pod}
			h.byPod[smp.Pod] = s
			h.Series = append(h.Series, s)
			sort.Slice(h.Series, func(i, j int) bool { return h.Series[i].Pod < h.Series[j].Pod })
		}
		s.Node, s.Devices = smp.Node, smp.Devices
		s.Points = append(s.Points, Point{T: at.Sub(h.Start), Utilization: smp.Utilization, MemoryUsed: smp.MemoryUsed})
		s.samples = append(s.samples, h.Samples)
	}
	h.Samples++
}

// Reader reads the plugins' /metrics of every node (node → body); nodes
// that could not be read are in the error map.
type Reader func(ctx context.Context) (map[string][]byte, map[string]error, error)

// Options of a recording.
type Options struct {
	Interval, Duration time.Duration
	// Keep selects the pods recorded (nil: all).
	Keep func(Sample) bool
	// Log gets one line per sample and per node that could not be read.
	Log io.Writer
}

// Record samples every Interval for Duration (the first sample at once, the
// last at Duration), until ctx ends.
func Record(ctx context.Context, read Reader, o Options) (*History, error) {
	if o.Interval <= 0 || o.Duration < 0 {
		return nil, fmt.Errorf("the interval must be positive and the duration not negative (got %s, %s)", o.Interval, o.Duration)
	}
	start := time.Now()
	h := NewHistory(start)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		bodies, errs, err := read(ctx)
		if err != nil {
			return h, err
		}
		samples, parseErrs := ParseNodes(bodies)
		if errs == nil {
			errs = map[string]error{}
		}
		for node, err := range parseErrs {
			errs[node] = err
		}
		kept := samples[:0]
		for _, s := range samples {
			if o.Keep == nil || o.Keep(s) {
				kept = append(kept, s)
			}
		}
		h.Add(time.Now(), kept)
		if o.Log != nil {
			logSample(o.Log, time.Since(start), kept, errs)
		}
		if time.Since(start)+o.Interval/2 > o.Duration {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return h, ctx.Err()
		case <-tick.C:
		}
	}
}

func logSample(w io.Writer, since time.Duration, samples []Sample, errs map[string]error) {
	pods := make([]string, 0, len(samples))
	for _, s := range samples {
		pods = append(pods, fmt.Sprintf("%s %.0f%%", s.Pod, 100*s.Utilization))
	}
	_, _ = fmt.Fprintf(w, "%6.0fs  %d pods using GPUs: %s\n", since.Seconds(), len(samples), strings.Join(pods, ", "))
	nodes := make([]string, 0, len(errs))
	for n := range errs {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		_, _ = fmt.Fprintf(w, "        node %s not read: %v\n", n, errs[n])
	}
}
