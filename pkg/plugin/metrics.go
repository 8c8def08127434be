package plugin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/endpoints"
	"github.com/gpudra/gpudra/pkg/health"
	"github.com/gpudra/gpudra/pkg/prepare"
)

// serveMetrics registers the plugin's metrics and serves them with the
// health endpoints until ctx is done. Ready means the kubelet's socket for
// this plugin exists (the helper creates it when it starts serving) and the
// kubelet has confirmed the registration.
func serveMetrics(ctx context.Context, o *Options, m *prepare.Manager, hs *healthService, reg8n *registration,
	tel *telemetryService) (net.Addr, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := prepare.NewMetrics(reg, m); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if hs != nil {
		hm, err := health.NewMetrics(reg)
		if err != nil {
			return nil, fmt.Errorf("register health metrics: %w", err)
		}
		hs.setMetrics(hm)
	}
	if err := tel.register(reg); err != nil {
		return nil, fmt.Errorf("register GPU telemetry metrics: %w", err)
	}
	// The helper names the socket after the pod in rolling-update mode.
	socket := filepath.Join(o.PluginDataDir(), "dra.sock")
	if o.PodUID != "" {
		socket = filepath.Join(o.PluginDataDir(), "dra-"+o.PodUID+".sock")
	}
	ready := endpoints.Check{Name: "dra-socket", Fn: func(*http.Request) error {
		_, err := os.Stat(socket)
		return err
	}}
	alive := endpoints.Check{Name: "process", Fn: func(*http.Request) error { return nil }}
	registered := endpoints.Check{Name: "kubelet-registration", Fn: reg8n.check}
	addr, err := endpoints.Listen(ctx, o.MetricsAddress, endpoints.NewMux(reg, []endpoints.Check{alive}, []endpoints.Check{ready, registered}))
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Serving metrics and health", "address", addr.String())
	return addr, nil
}
