// Package telemetry samples the node's GPUs through NVML — utilization,
// memory, power, temperature, SM clock, clocks event (throttle) reasons —
// at a fixed interval, away from the kubelet's prepare calls, and serves
// the last sample as Prometheus gauges labelled with the claim and the pods
// that hold each device (empty while the device is free). XIDs the health
// monitor reports are counted per GPU.
//
// Every field is read on its own: a field NVML answers NOT_SUPPORTED (an
// L4 has no GPM, a GPU in MIG mode no utilization of its own, a MIG device
// no power reading) is left out of the sample, never an error. NVML
// functions newer than the driver may be missing from its libnvidia-ml, and
// calling a missing function ends the process, so the optional ones
// (clocks event reasons, GPM) are looked up first.
//
// MIG devices get their memory use from nvmlDeviceGetMemoryInfo on the MIG
// device and their utilization from GPM (nvmlGpmMigSampleGet with the GPU
// instance ID and nvmlGpmMetricsGet, GPM_METRIC_GRAPHICS_UTIL between two
// consecutive samples): NVML's only per-MIG utilization, Hopper and newer.
// Power, temperature and clocks exist only for the physical GPU.
package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// DefaultInterval between two samples.
const DefaultInterval = 10 * time.Second

// Device is a device of the node as the ResourceSlice names it.
type Device struct {
	// Name is the device name, e.g. "gpu-0" or "gpu-0-mig-3g40gb-4".
	Name string
	UUID string
	// MIGProfile is set for MIG devices, e.g. "3g.40gb".
	MIGProfile string
}

// ClaimRef names a ResourceClaim.
type ClaimRef struct {
	Namespace, Name, UID string
}

// Holding is a device held by a prepared claim.
type Holding struct {
	Device Device
	Claim  ClaimRef
	// Admin: the claim has admin access (a monitoring agent); it does not
	// label the device's series.
	Admin bool
}

// Config of a Sampler.
type Config struct {
	// Node is the node name (the node label).
	Node string
	Lib  nvml.Interface
	// Devices are the node's GPUs and the MIG devices that exist
	// independently of claims (static MIG). Devices that only exist while
	// held (dynamic MIG) come from Held.
	Devices []Device
	// Held lists the devices prepared claims hold; nil: nothing is held.
	Held func(context.Context) ([]Holding, error)
	// Pods names the pods of the claims; nil: no pod labels.
	Pods PodSource
	// HideWorkloads leaves the claim and pod labels of every series empty
	// (one series per device): /metrics then names no tenant's namespace,
	// claim or pod. Held is still read, for the dynamic MIG devices.
	HideWorkloads bool
	// Interval between samples; DefaultInterval when 0.
	Interval time.Duration
}

// PodSource knows the pods of prepared claims (ClaimPods).
type PodSource interface {
	// Pods returns the names of the pods the claim is reserved for (in
	// the claim's namespace).
	Pods(context.Context, ClaimRef) []string
	// Forget drops what it knows of claims not in keep (UIDs): they were
	// released.
	Forget(keep map[string]bool)
}

// Sampler samples the GPUs and serves what it read. Create it with New.
type Sampler struct {
	cfg     Config
	reader  *reader
	metrics *metrics
	last    atomic.Pointer[snapshot]
	// sampleMu keeps samples (Run's loop and SampleOnce) apart and guards
	// heldErr, the last error of Held (logged once).
	sampleMu sync.Mutex
	heldErr  string
}

// New returns a sampler; nothing is read until Run or SampleOnce.
func New(cfg Config) *Sampler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	s := &Sampler{cfg: cfg, reader: newReader(cfg.Lib)}
	s.metrics = newMetrics(cfg.Node, s)
	s.last.Store(&snapshot{})
	return s
}

// Register adds the sampler's metrics to reg.
func (s *Sampler) Register(reg prometheus.Registerer) error { return s.metrics.register(reg) }

// Run samples every interval until ctx is done, then releases what it
// holds in NVML (GPM samples). The first sample is taken at once.
func (s *Sampler) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("Sampling GPU telemetry", "interval", s.cfg.Interval, "devices", len(s.cfg.Devices))
	defer s.Close()
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		s.SampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Close releases what SampleOnce holds in NVML (GPM samples); Run does it
// when it returns.
func (s *Sampler) Close() {
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	s.reader.close()
}

// SampleOnce reads every device and replaces the served sample.
func (s *Sampler) SampleOnce(ctx context.Context) {
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	start := time.Now()
	logger := klog.FromContext(ctx)
	var holdings []Holding
	if s.cfg.Held != nil {
		var err error
		holdings, err = s.cfg.Held(ctx)
		switch {
		case err != nil && err.Error() != s.heldErr:
			// The devices are still sampled; the claims that could not be
			// read leave their devices' labels empty until they can.
			logger.Error(err, "Reading the prepared claims for telemetry labels failed")
			s.heldErr = err.Error()
		case err == nil:
			s.heldErr = ""
		}
	}
	if s.cfg.Pods != nil {
		keep := map[string]bool{}
		for _, h := range holdings {
			keep[h.Claim.UID] = true
		}
		s.cfg.Pods.Forget(keep)
	}
	devices := devicesOf(s.cfg.Devices, holdings)
	labelled := holdings
	if s.cfg.HideWorkloads {
		labelled = nil
	}
	snap := &snapshot{}
	seen := make(map[string]bool, len(devices))
	for _, d := range devices {
		seen[d.UUID] = true
		r, ok := s.reader.read(ctx, d)
		if !ok {
			continue // gone (a dynamic MIG device just destroyed) or lost
		}
		for _, labels := range labelSets(ctx, d, labelled, s.cfg.Pods) {
			snap.series = append(snap.series, series{labels: labels, reading: r})
		}
	}
	s.reader.forget(seen)
	s.last.Store(snap)
	s.metrics.observeSample(time.Since(start))
}

// ObserveXID counts an XID the health monitor received for the GPU with
// this UUID.
func (s *Sampler) ObserveXID(uuid string, xid uint64) { s.metrics.xid(uuid, xid) }

// devicesOf is the static devices plus the held devices that are not among
// them (dynamic MIG devices), each once.
func devicesOf(static []Device, holdings []Holding) []Device {
	out := append([]Device(nil), static...)
	known := make(map[string]bool, len(static))
	for _, d := range static {
		known[d.UUID] = true
	}
	for _, h := range holdings {
		if h.Device.UUID != "" && !known[h.Device.UUID] {
			known[h.Device.UUID] = true
			out = append(out, h.Device)
		}
	}
	return out
}

// DevicesOf lists the devices of a discovered node to sample: every GPU
// that answered discovery, and the MIG devices of those in MIG mode.
func DevicesOf(node *model.Node) []Device {
	var out []Device
	for i := range node.GPUs {
		g := &node.GPUs[i]
		if g.Unreachable != "" {
			continue // published tainted from its last known identity; nothing answers
		}
		out = append(out, Device{Name: g.DeviceName(), UUID: g.UUID})
		if !g.MIGEnabled {
			continue
		}
		for _, m := range g.MIGDevices {
			out = append(out, Device{Name: model.MIGDeviceName(g, m.Profile, m.ProfileID, m.Start), UUID: m.UUID, MIGProfile: m.Profile})
		}
	}
	return out
}
