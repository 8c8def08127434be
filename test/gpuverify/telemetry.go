package gpuverify

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/telemetry"
)

// TelemetryResult is what the plugin's GPU telemetry read, by device:
// metric name (without gpudra_gpu_) -> value of the last sample.
type TelemetryResult struct {
	Devices map[string]map[string]float64 `json:"devices"`
}

// telemetry is step 5: the plugin's sampler (internal/plugin/telemetry) reads every
// device twice, 1.5 s apart (GPM needs two samples for a MIG device's
// utilization). It only reads: GPM samples are buffers of the library.
// Every device must answer with its memory; fields the GPU lacks are
// listed, not failed (NVML answers NOT_SUPPORTED for them).
func (k *kit) telemetry(ctx context.Context, node *model.Node) {
	s := k.r.section("5. GPU telemetry: what the plugin's /metrics reads per device (internal/plugin/telemetry)")
	for _, sym := range []string{"nvmlDeviceGetCurrentClocksEventReasons", "nvmlGpmMigSampleGet"} {
		if err := k.lib.Extensions().LookupSymbol(sym); err != nil {
			s.info("%s is not in this libnvidia-ml (%v): its series are left out", sym, err)
		}
	}
	sampler := telemetry.New(telemetry.Config{Node: k.cfg.NodeName, Lib: k.lib, Devices: telemetry.DevicesOf(node)})
	reg := prometheus.NewRegistry()
	if !s.check(sampler.Register(reg), "register the telemetry metrics") {
		return
	}
	start := time.Now()
	sampler.SampleOnce(ctx)
	first := time.Since(start)
	time.Sleep(1500 * time.Millisecond)
	sampler.SampleOnce(ctx)
	sampler.Close()
	families, err := reg.Gather()
	if !s.check(err, "gather the telemetry metrics") {
		return
	}
	res := &TelemetryResult{Devices: map[string]map[string]float64{}}
	k.r.Telemetry = res
	for _, f := range families {
		name, ok := strings.CutPrefix(f.GetName(), "gpudra_gpu_")
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			var device, reason string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "device":
					device = l.GetValue()
				case "reason":
					reason = l.GetValue()
				}
			}
			if reason != "" {
				if m.GetGauge().GetValue() == 0 {
					continue
				}
				name = "throttle_reason:" + reason
			}
			if res.Devices[device] == nil {
				res.Devices[device] = map[string]float64{}
			}
			res.Devices[device][name] = m.GetGauge().GetValue()
		}
	}
	s.info("one sample of %d devices took %s", len(telemetry.DevicesOf(node)), first.Round(time.Microsecond))
	for _, d := range telemetry.DevicesOf(node) {
		got := res.Devices[d.Name]
		if _, ok := got["memory_total_bytes"]; !ok {
			s.fail("%s (%s): no memory reading", d.Name, d.UUID)
			continue
		}
		var fields []string
		for f, v := range got {
			fields = append(fields, fmt.Sprintf("%s=%g", f, v))
		}
		sort.Strings(fields)
		s.pass("%s: %s", d.Name, strings.Join(fields, " "))
	}
}
