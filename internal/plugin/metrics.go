package plugin

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/shared/endpoints"
	"github.com/gpudra/gpudra/internal/shared/telemetry/names"
)

// serveMetrics registers the plugin's metrics and serves them with the
// health endpoints until ctx is done. Ready means the kubelet's socket for
// this plugin exists (the helper creates it when it starts serving) and the
// kubelet has confirmed the registration.
func serveMetrics(ctx context.Context, o *Options, client kubernetes.Interface, m *prepare.Manager, hs *healthService,
	reg8n *registration, tel *telemetryService, pm *pluginMetrics) (net.Addr, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := prepare.NewMetrics(reg, m); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if err := pm.register(reg); err != nil {
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
	var h http.Handler = endpoints.NewMux(reg, []endpoints.Check{alive}, []endpoints.Check{ready, registered})
	var tlsConfig *tls.Config
	if o.Metrics.Secure {
		auth, err := endpoints.DelegatedAuth(client)
		if err != nil {
			return nil, err
		}
		h = endpoints.Protect(h, auth)
		tlsConfig, err = endpoints.TLSConfig(ctx, endpoints.ServingCert{CertFile: o.Metrics.CertFile, KeyFile: o.Metrics.KeyFile,
			Host: "gpudra-kubelet-plugin." + o.NodeName})
		if err != nil {
			return nil, err
		}
	}
	addr, err := endpoints.ListenTLS(ctx, o.MetricsAddress, h, tlsConfig)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Serving metrics and health", "address", addr.String(), "secure", o.Metrics.Secure)
	return addr, nil
}

// MetricsOptions protect /metrics (--metrics-secure and its certificate
// flags; see internal/shared/endpoints and docs/security.md).
type MetricsOptions struct {
	// Secure serves the metrics address over TLS and answers /metrics only
	// to callers the API server authenticates and authorizes.
	Secure   bool
	CertFile string
	KeyFile  string
}

func (o *Options) addMetricsFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddress, "metrics-address", "",
		"Serve Prometheus /metrics, /healthz and /readyz on this address (e.g. :8081); empty disables.")
	fs.BoolVar(&o.Metrics.Secure, names.FlagMetricsSecure, false,
		"Serve the metrics address over HTTPS and answer /metrics only to a bearer token whose user may get the nonResourceURL /metrics "+
			"(TokenReview and SubjectAccessReview; the plugin's ServiceAccount needs create on both). /healthz and /readyz stay open.")
	fs.StringVar(&o.Metrics.CertFile, "metrics-cert-file", "",
		"PEM certificate for --metrics-secure, reloaded when it changes; empty: a self-signed certificate generated at start-up.")
	fs.StringVar(&o.Metrics.KeyFile, "metrics-key-file", "", "PEM key of --metrics-cert-file.")
}

func (o *Options) validateMetrics() error {
	if !o.Metrics.Secure && (o.Metrics.CertFile != "" || o.Metrics.KeyFile != "") {
		return fmt.Errorf("--metrics-cert-file and --metrics-key-file need --%s: without it the metrics address serves plain HTTP", names.FlagMetricsSecure)
	}
	if (o.Metrics.CertFile == "") != (o.Metrics.KeyFile == "") {
		return fmt.Errorf("give both --metrics-cert-file and --metrics-key-file, or neither for a self-signed certificate")
	}
	return nil
}

// Metric names of the plugin's calls and API writes, documented in
// docs/health-and-telemetry.md.
const (
	MetricCallSeconds        = "gpudra_plugin_call_duration_seconds"
	MetricClaimReadSeconds   = "gpudra_plugin_claim_read_duration_seconds"
	MetricStatusWrites       = "gpudra_plugin_claim_status_writes_total"
	MetricStatusWriteSeconds = "gpudra_plugin_claim_status_write_duration_seconds"
)

// Results of a claim status reconciliation (MetricStatusWrites).
const (
	statusApplied   = "applied"
	statusUnchanged = "unchanged" // nothing to remove: no write
	statusGone      = "gone"      // the claim was deleted or replaced meanwhile
	statusFailed    = "failed"
)

// callBuckets span a fast prepare (a claim read and an fsync, about 1 ms)
// to a slow one.
var callBuckets = []float64{0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1, 5}

// pluginMetrics time what happens around the prepare manager: the kubelet's
// calls as the plugin serves them, the claim reads they need, and the
// asynchronous claim status writes. Its methods work on an unregistered
// (never served) value too, and record nothing on nil.
type pluginMetrics struct {
	calls        *prometheus.HistogramVec
	claimReads   prometheus.Histogram
	statusWrites *prometheus.CounterVec
	statusWrite  prometheus.Histogram
}

func newPluginMetrics() *pluginMetrics {
	return &pluginMetrics{
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricCallSeconds,
			Help:    "Time from a kubelet DRA call's arrival to its answer, by method (claim reads, locks, files, everything).",
			Buckets: callBuckets}, []string{"method"}),
		claimReads: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricClaimReadSeconds,
			Help: "Time of one consistent read of a claim from the API server for a prepare call.", Buckets: callBuckets}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricStatusWrites,
			Help: "Reconciliations of a claim's status.devices entries, by result (applied; unchanged: nothing to remove, no write; gone: the claim was deleted or replaced; failed)."},
			[]string{"result"}),
		statusWrite: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricStatusWriteSeconds,
			Help: "Time of one server-side apply of a claim's status.devices entries.", Buckets: callBuckets}),
	}
}

func (pm *pluginMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{pm.calls, pm.claimReads, pm.statusWrites, pm.statusWrite} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// call observes a kubelet call; fullMethod is gRPC's "/service/method".
func (pm *pluginMetrics) call(fullMethod string, start time.Time) {
	if pm == nil {
		return
	}
	pm.calls.WithLabelValues(path.Base(fullMethod)).Observe(time.Since(start).Seconds())
}

func (pm *pluginMetrics) claimRead(start time.Time) {
	if pm != nil {
		pm.claimReads.Observe(time.Since(start).Seconds())
	}
}

func (pm *pluginMetrics) statusWritten(result string, start time.Time) {
	if pm == nil {
		return
	}
	pm.statusWrites.WithLabelValues(result).Inc()
	if result != statusUnchanged {
		pm.statusWrite.Observe(time.Since(start).Seconds())
	}
}
