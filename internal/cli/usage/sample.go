package usage

import (
	"bytes"
	"fmt"
	"io"
	"sort"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpudra/gpudra/internal/cli/status"
	"github.com/gpudra/gpudra/internal/shared/telemetry/names"
)

// Sample is what one pod used of the devices it holds on one node, at one
// scrape: the mean utilization of those devices (0–1) and the sum of their
// memory in use. A device that several pods share (time slicing, MPS) is
// counted in full for each of them: NVML reports per device.
type Sample struct {
	Pod         string // namespace/name
	Node        string
	Devices     []string
	Utilization float64
	MemoryUsed  float64 // bytes
}

// ParseSamples reads the per-pod samples from one node's plugin /metrics
// (Prometheus text format). Devices that no pod holds are left out.
func ParseSamples(node string, r io.Reader) ([]Sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse the metrics of node %s: %w", node, err)
	}
	type key struct{ pod, device string }
	util, mem := map[key]float64{}, map[key]float64{}
	for name, into := range map[string]map[key]float64{
		names.MetricUtilization: util,
		names.MetricMemoryUsed:  mem,
	} {
		for _, m := range families[name].GetMetric() {
			ns, pod := status.MetricLabel(m, names.LabelPodNamespace), status.MetricLabel(m, names.LabelPodName)
			if pod == "" {
				continue
			}
			into[key{ns + "/" + pod, status.MetricLabel(m, names.LabelDevice)}] = m.GetGauge().GetValue()
		}
	}
	byPod := map[string]*Sample{}
	for k, u := range util {
		s := byPod[k.pod]
		if s == nil {
			s = &Sample{Pod: k.pod, Node: node}
			byPod[k.pod] = s
		}
		s.Devices = append(s.Devices, k.device)
		s.Utilization += u
		s.MemoryUsed += mem[k]
	}
	out := make([]Sample, 0, len(byPod))
	for _, s := range byPod {
		s.Utilization /= float64(len(s.Devices))
		sort.Strings(s.Devices)
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, nil
}

// ParseNodes is ParseSamples over the /metrics of several nodes.
func ParseNodes(bodies map[string][]byte) ([]Sample, map[string]error) {
	var out []Sample
	errs := map[string]error{}
	for node, body := range bodies {
		s, err := ParseSamples(node, bytes.NewReader(body))
		if err != nil {
			errs[node] = err
			continue
		}
		out = append(out, s...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, errs
}
