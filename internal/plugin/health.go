package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/pflag"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/health"
)

// HealthOptions configure GPU health monitoring.
type HealthOptions struct {
	Enabled bool
	// Taints is --health-taints, the schema of the published taints
	// (compat.TaintsNVIDIA or compat.TaintsGpudra; empty for the mode's).
	Taints        string
	IgnoredXIDs   string
	ProbeInterval time.Duration
	DegradedHold  time.Duration
}

func (o *Options) addHealthFlags(fs *pflag.FlagSet) {
	h := &o.Health
	fs.BoolVar(&h.Enabled, "health-monitoring", true,
		"Watch the GPUs' health through NVML: taint unhealthy devices in the ResourceSlice and report device health to the kubelet.")
	fs.StringVar(&h.IgnoredXIDs, "health-ignored-xids", health.FormatXIDs(health.DefaultIgnoredXIDs),
		"Comma-separated XIDs that are caused by applications and leave the GPU healthy.")
	fs.StringVar(&h.Taints, "health-taints", "",
		"Taint schema in --compatibility=nvidia: nvidia (the default: NVIDIA's keys gpu.nvidia.com/xid and gpu.nvidia.com/gpu-lost, "+
			"always NoSchedule, so its users' tolerations match) or gpudra (gpudra's xid, ecc, lost and recovery-action taints in the "+
			"gpu.nvidia.com domain, NoExecute for errors that leave the GPU unusable, which evicts the pods using it). Natively only gpudra.")
	fs.DurationVar(&h.ProbeInterval, "health-probe-interval", 5*time.Second, "How often every GPU is probed (answers, recovery action, ECC counters).")
	fs.DurationVar(&h.DegradedHold, "health-degraded-hold", 10*time.Minute,
		"How long a degraded (NoSchedule) condition without a pending recovery action lasts.")
}

// healthService connects the monitor to the slice publisher, the kubelet's
// health stream, claim status and events.
type healthService struct {
	mon *health.Monitor
	pub *publisher
	// running is done when the monitor's loop has returned.
	running sync.WaitGroup
}

// newHealthService creates the monitor (probed once, not started) or
// returns nil when monitoring is off.
func newHealthService(ctx context.Context, o *Options, gpus *GPUNode, pub *publisher, passedThrough func(uuid string) bool) (*healthService, error) {
	if !o.Health.Enabled {
		return nil, nil
	}
	ignored, err := health.ParseXIDs(o.Health.IgnoredXIDs)
	if err != nil {
		return nil, fmt.Errorf("--health-ignored-xids: %w", err)
	}
	cfg := health.Config{Lib: gpus.Lib, IgnoredXIDs: ignored, ProbeInterval: o.Health.ProbeInterval, DegradedHold: o.Health.DegradedHold,
		PassedThrough: passedThrough}
	if err := o.persistHealth(&cfg); err != nil {
		return nil, err
	}
	for _, g := range gpus.Node.GPUs {
		// A GPU without a handle (published from its last known identity,
		// or lost since discovery) is monitored as lost, never fatal.
		hg := health.GPU{UUID: g.UUID, Name: g.DeviceName(), PCIBusID: g.PCIBusID, Unreachable: g.Unreachable}
		if g.Unreachable == "" {
			dev, ret := gpus.Lib.DeviceGetHandleByUUID(g.UUID)
			if ret == nvml.SUCCESS {
				hg.Device = dev
			} else {
				hg.Unreachable = discovery.LostReason(ret)
				klog.FromContext(ctx).Error(ret, "No NVML handle of a discovered GPU; monitoring it as lost", "gpu", hg.Name, "uuid", g.UUID)
			}
		}
		cfg.GPUs = append(cfg.GPUs, hg)
	}
	hs := &healthService{pub: pub}
	hs.mon = health.New(cfg)
	pub.taints = hs.mon.Snapshot
	// Probe once now, so that the first slice already carries the taints of
	// GPUs that are broken at start-up.
	hs.mon.ProbeAll(ctx)
	return hs, nil
}

// setMetrics must be called before run.
func (hs *healthService) setMetrics(m *health.Metrics) { hs.mon.SetMetrics(m) }

// run starts the monitor and republishes the slice with new taints after
// every change. onChange runs after each republish (events, claim status).
func (hs *healthService) run(ctx context.Context, onChange func(context.Context, health.Snapshot)) {
	changes, stop := hs.mon.Subscribe()
	go func() {
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-changes:
			}
			snap := hs.mon.Snapshot()
			hs.pub.Retaint(ctx)
			if onChange != nil {
				onChange(ctx, snap)
			}
		}
	}()
	hs.running.Add(1)
	go func() {
		defer hs.running.Done()
		hs.mon.Run(ctx)
	}()
}

// wait returns when the monitor started by run has stopped (its context is
// done).
func (hs *healthService) wait() { hs.running.Wait() }

// watch serves one kubelet health stream.
func (hs *healthService) watch(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return hs.mon.Stream(ctx, reports, hs.pub.Refs, health.StreamRefresh)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report of every
// device at once, after every change and every 10 s.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if d.health == nil {
		return kubeletplugin.ErrHealthNotSupported
	}
	return d.health.watch(ctx, reports)
}
