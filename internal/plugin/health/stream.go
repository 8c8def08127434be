package health

import (
	"context"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// StreamRefresh is how often an unchanged report is sent again: well inside
// the kubelet's 30 s health check timeout.
const StreamRefresh = 10 * time.Second

// Stream sends the kubelet a health report of the devices refs returns: one
// at once, then one after every change and at least every refresh, until
// ctx is done. Several streams may run at once (each kubelet connection
// gets its own); each subscribes to the monitor's changes.
func (m *Monitor) Stream(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport, refs func() []DeviceRef, refresh time.Duration) error {
	if refresh <= 0 {
		refresh = StreamRefresh
	}
	changes, stop := m.Subscribe()
	defer stop()
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	for {
		r := m.Snapshot().Report(refs(), m.cfg.now(), 0)
		select {
		case <-ctx.Done():
			return nil
		case reports <- r:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-tick.C:
		}
	}
}
