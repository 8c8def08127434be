package plugin

import (
	"context"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// publisher owns what the node publishes: the devices built from discovery
// (SetBase, whenever they change) with the health monitor's taints applied
// on top (Retaint, whenever health changes). The helper's ResourceSlice
// controller then reconciles the slices, retrying failed writes with
// exponential backoff. Only the node's leading instance publishes (see
// publishlock.go); the other one keeps the same state without writing it.
type publisher struct {
	mu     sync.Mutex
	helper *kubeletplugin.Helper
	// leading: this instance holds the node's publish lock.
	leading bool
	base    resourceslice.DriverResources
	// taints returns the current health; nil publishes the base as is.
	taints func() health.Snapshot
	// names: the health taints are published in the driver's domain and
	// the schema of names.HealthTaints (publishedTaints); the zero value
	// keeps internal/plugin/health's keys.
	names compat.Names
	// generation is the lowest pool generation to publish: one above what
	// an earlier instance left, so that a takeover always writes a new
	// generation (clients see when this instance's slices are in place).
	generation int64
}

// SetBase replaces the devices to publish and publishes them once a helper
// is attached.
func (p *publisher) SetBase(ctx context.Context, res resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.base = res
	return p.publishLocked(ctx)
}

// Attach publishes through the helper from now on (once leading).
func (p *publisher) Attach(ctx context.Context, h *kubeletplugin.Helper) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.helper = h
	return p.publishLocked(ctx)
}

// lead makes this instance the node's publisher and publishes its pools
// with at least the given generation (publishFirst's).
func (p *publisher) lead(ctx context.Context, generation int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leading = true
	p.generation = generation
	return p.publishLocked(ctx)
}

// resign stops publishing; the helper's controller keeps what it wrote.
func (p *publisher) resign() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leading = false
}

// Retaint publishes the base again with the current taints.
func (p *publisher) Retaint(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.publishLocked(ctx); err != nil {
		// Only possible without a node name, which Validate rules out.
		klog.FromContext(ctx).Error(err, "Publishing device taints failed")
	}
}

func (p *publisher) publishLocked(ctx context.Context) error {
	if p.helper == nil || !p.leading {
		return nil
	}
	return p.helper.PublishResources(ctx, publishedTaintKeys(p.names, p.desiredLocked()))
}

// publishedTaintKeys puts the health taints of res into the driver's
// domain and the schema its names select (publishedTaints). Natively
// (gpu.gpudra.io) res is returned as it is. The devices of res are copied
// before they change, since they may be the base's; res's slice lists must
// be its own (desiredLocked's are).
func publishedTaintKeys(n compat.Names, res resourceslice.DriverResources) resourceslice.DriverResources {
	if n.Driver == "" || n.TaintKey(health.KeyLost) == health.KeyLost && n.HealthTaints != compat.TaintsNVIDIA {
		return res
	}
	for _, pool := range res.Pools {
		for k, s := range pool.Slices {
			if !slices.ContainsFunc(s.Devices, func(d resourceapi.Device) bool { return len(d.Taints) > 0 }) {
				continue
			}
			devices := slices.Clone(s.Devices)
			for i := range devices {
				if len(devices[i].Taints) > 0 {
					devices[i].Taints = publishedTaints(n, devices[i].Taints)
				}
			}
			pool.Slices[k].Devices = devices
		}
	}
	return res
}

// desiredLocked is the base with taints, sharing nothing mutable with it.
func (p *publisher) desiredLocked() resourceslice.DriverResources {
	out := resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(p.base.Pools))}
	var snap *health.Snapshot
	if p.taints != nil {
		s := p.taints()
		snap = &s
	}
	for name, pool := range p.base.Pools {
		np := pool
		np.Generation = max(np.Generation, p.generation)
		np.Slices = make([]resourceslice.Slice, len(pool.Slices))
		for i, s := range pool.Slices {
			if snap != nil {
				s.Devices = snap.ApplyTaints(s.Devices)
			}
			np.Slices[i] = s
		}
		out.Pools[name] = np
	}
	return out
}

// Refs lists the published devices of every pool with their GPUs, for the
// kubelet's health reports.
func (p *publisher) Refs() []health.DeviceRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []health.DeviceRef
	for name, pool := range p.base.Pools {
		for _, s := range pool.Slices {
			out = append(out, health.Refs(name, s.Devices)...)
		}
	}
	return out
}

// Devices returns the published (tainted) devices by name, across pools.
func (p *publisher) Devices() map[string]resourceapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]resourceapi.Device{}
	for _, pool := range p.desiredLocked().Pools {
		for _, s := range pool.Slices {
			for _, d := range s.Devices {
				out[d.Name] = d
			}
		}
	}
	return out
}
