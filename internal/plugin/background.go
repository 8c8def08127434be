package plugin

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/plugin/health"
)

// startBackground starts what runs beside the kubelet's calls: the GPU
// telemetry sampler, the NVLink fabric poll, the health monitor (and with it taint publishing,
// health events and claim status refreshes), the claim status writer and
// the MPS daemon check.
func (d *Driver) startBackground(ctx context.Context) {
	if d.mpsCheckInterval > 0 {
		d.background.Go(func() { superviseMPS(ctx, d.manager, d.mpsCheckInterval) })
	}
	d.telemetry.run(ctx, &d.background)
	if d.fabric != nil {
		d.background.Go(func() { d.fabric.run(ctx) })
	}
	if d.status != nil {
		if d.health != nil {
			d.status.health = d.health.mon.Snapshot
		}
		go d.status.run(ctx)
		// Claims prepared before a restart get their status (again).
		d.status.enqueueHeld(ctx)
	}
	if d.health == nil {
		return
	}
	prev := d.health.mon.Snapshot()
	d.health.run(ctx, func(ctx context.Context, cur health.Snapshot) {
		d.events.healthChanged(ctx, prev, cur, d.health.pub.Devices())
		prev = cur
		d.status.enqueueHeld(ctx)
	})
}

// afterPrepare records failures as events and queues the status.devices
// write of every prepared claim (asynchronously: prepare does not wait).
func (d *Driver) afterPrepare(claims []*resourceapi.ResourceClaim, results map[types.UID]kubeletplugin.PrepareResult) {
	d.events.prepareFailed(claims, results)
	d.telemetry.observe(claims, results)
	for _, c := range claims {
		if r, ok := results[c.UID]; ok && r.Err == nil && len(r.Devices) > 0 {
			d.status.prepared(c)
		}
	}
}

// afterUnprepare queues the removal of the driver's status.devices entries.
func (d *Driver) afterUnprepare(claims []kubeletplugin.NamespacedObject, results map[types.UID]error) {
	for _, c := range claims {
		if err, ok := results[c.UID]; ok && err == nil {
			d.status.unprepared(claimKey{Namespace: c.Namespace, Name: c.Name, UID: c.UID})
		}
	}
}

// maxDevicesPerSlice: devices with taints lower the API's limit to 64 per
// slice, so with health monitoring (taints may appear at any time) slices
// are cut at 64.
func (o *Options) maxDevicesPerSlice() int {
	if o.Health.Enabled && o.MaxDevicesPerSlice > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
		return resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	return o.MaxDevicesPerSlice
}
