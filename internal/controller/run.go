package controller

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpudra/gpudra/internal/shared/endpoints"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/controller/certs"
	"github.com/gpudra/gpudra/internal/controller/computedomain"
	"github.com/gpudra/gpudra/internal/controller/deviceclass"
	"github.com/gpudra/gpudra/internal/controller/webhook"
)

// Metric names besides webhook.DecisionsMetric.
const (
	IsLeaderMetric   = "gpudra_controller_is_leader"
	CertExpiryMetric = "gpudra_webhook_certificate_expiry_timestamp_seconds"
)

// ComponentName is the user agent, event reporter and log name.
const ComponentName = "gpudra-controller"

// Run starts the gpu-controller and blocks until ctx is done (nil) or a
// component fails (its error). opts are validated unless Validate has
// already succeeded (the command runs it before Run).
func Run(ctx context.Context, opts *Options) error {
	if err := opts.validateOnce(); err != nil {
		return err
	}
	cfg, err := restConfig(opts)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create dynamic Kubernetes client: %w", err)
	}
	webhookLn, err := net.Listen("tcp", fmt.Sprintf(":%d", opts.WebhookPort))
	if err != nil {
		return fmt.Errorf("listen on --webhook-port=%d: %w", opts.WebhookPort, err)
	}
	metricsLn, err := net.Listen("tcp", fmt.Sprintf(":%d", opts.MetricsPort))
	if err != nil {
		_ = webhookLn.Close()
		return fmt.Errorf("listen on --metrics-port=%d: %w", opts.MetricsPort, err)
	}
	return run(ctx, opts, clients{client, dyn}, webhookLn, metricsLn)
}

// clients are the API clients of the controller; dyn reads and writes
// ComputeDomains (custom resources of one or two groups). A nil dyn turns
// the ComputeDomain controller off.
type clients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func restConfig(opts *Options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if opts.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", opts.Kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("no --kubeconfig given and not running in a pod: %w", err)
	}
	cfg.QPS, cfg.Burst = opts.KubeAPIQPS, opts.KubeAPIBurst
	cfg.UserAgent = ComponentName
	return cfg, nil
}

// run wires the components on the given listeners.
func run(ctx context.Context, opts *Options, cs clients, webhookLn, metricsLn net.Listener) error {
	if err := opts.validateOnce(); err != nil {
		return err
	}
	client := cs.kube
	logger := klog.FromContext(ctx)
	reg := prometheus.NewRegistry()
	holder := &certs.Holder{}
	isLeader := prometheus.NewGauge(prometheus.GaugeOpts{Name: IsLeaderMetric,
		Help: "1 while this replica runs the leader-only work (DeviceClasses, certificate rotation), else 0."})
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: CertExpiryMetric,
		Help: "Expiry of the webhook serving certificate in use, as a Unix timestamp; 0 until one is loaded."},
		func() float64 {
			if t := holder.NotAfter(); !t.IsZero() {
				return float64(t.Unix())
			}
			return 0
		})
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		reg.Register(isLeader), reg.Register(expiry)); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	handler, err := webhook.NewHandlerFor(reg, opts.Names())
	if err != nil {
		return err
	}
	reconciles, err := deviceclass.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	cdMetrics, err := computedomain.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}

	live := []endpoints.Check{{Name: "ping", Fn: func(*http.Request) error { return nil }}}
	ready := []endpoints.Check{endpoints.BoolCheck("certificate", holder.Ready,
		fmt.Sprintf("no webhook serving certificate loaded yet (--cert-mode=%s; see the log)", opts.CertMode))}
	var watchdog *leaderelection.HealthzAdaptor
	if opts.LeaderElect {
		watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		live = append(live, endpoints.Check{Name: "leader-election", Fn: watchdog.Check})
	}

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("start event recording: %w", err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, ComponentName)

	g := newGroup(ctx)
	switch {
	case opts.usesSecret():
		src := &certs.SecretSource{Client: client, Namespace: opts.Namespace, Name: opts.CertSecretName, Holder: holder}
		ready = append(ready, endpoints.BoolCheck("certificate-secret-watch", src.HasSynced, "the watch on the certificate Secret has not synced"))
		g.Go("certificate Secret watch", src.Run)
	default:
		src := &certs.FileSource{CertFile: opts.CertFile, KeyFile: opts.KeyFile, Interval: opts.CertFileInterval, Holder: holder}
		g.Go("certificate file watch", src.Run)
	}

	mux := http.NewServeMux()
	mux.Handle(webhook.Path, handler)
	webhookCtx := klog.NewContext(context.Background(), logger.WithName("webhook"))
	g.Go("webhook server", func(ctx context.Context) error {
		return serve(ctx, webhookLn, mux, holder, webhookCtx)
	})
	g.Go("metrics server", func(ctx context.Context) error {
		return serve(ctx, metricsLn, endpoints.NewMux(reg, live, ready), nil, context.Background())
	})
	logger.Info("Serving", "webhook", webhookLn.Addr().String()+webhook.Path, "metrics", metricsLn.Addr().String(),
		"certMode", opts.CertMode, "leaderElect", opts.LeaderElect)

	leaderWork := func(ctx context.Context) {
		isLeader.Set(1)
		defer isLeader.Set(0)
		runLeaderWork(ctx, opts, cs, holder, recorder, metrics{reconciles, cdMetrics})
	}
	if opts.LeaderElect {
		g.Go("leader election", func(ctx context.Context) error { return runElected(ctx, client, opts, watchdog, leaderWork) })
	} else {
		g.Go("leader work", func(ctx context.Context) error { leaderWork(ctx); return nil })
	}
	return g.Wait()
}

type metrics struct {
	deviceClasses  *deviceclass.Metrics
	computeDomains *computedomain.Metrics
}

// runLeaderWork runs the DeviceClass controller, the ComputeDomain
// controller and the self-managed certificate rotation until ctx is done.
func runLeaderWork(ctx context.Context, opts *Options, cs clients, holder *certs.Holder, recorder events.EventRecorder, m metrics) {
	logger := klog.FromContext(ctx)
	client := cs.kube
	var wg sync.WaitGroup
	if opts.CertMode == CertModeSelfManaged {
		m := &certs.SelfManaged{
			Client: client, Namespace: opts.Namespace, SecretName: opts.CertSecretName,
			DNSNames:          certs.ServiceDNSNames(opts.WebhookServiceName, opts.Namespace, opts.CertExtraSANs...),
			WebhookConfigName: opts.WebhookConfigName, Validity: opts.CertValidity,
			RotateBefore: opts.CertRotateBefore, CheckInterval: opts.CertCheckInterval, Holder: holder,
		}
		wg.Go(func() {
			if err := m.Run(klog.NewContext(ctx, logger.WithName("certs"))); err != nil {
				logger.Error(err, "Certificate management stopped")
			}
		})
	}
	if opts.ManageDeviceClasses {
		factory := informers.NewSharedInformerFactory(client, 0)
		ctrl, err := deviceclass.New(client, factory, recorder, deviceclass.Options{
			PerModelClasses: opts.PerModelClasses, ExtendedResourceName: opts.ExtendedResourceName,
			PerProfileMIGClasses: opts.PerProfileMIGClasses, MIGExtendedResourcePrefix: opts.MIGExtendedResourcePrefix,
			MaxDerivedClasses: opts.MaxDerivedClasses, Metrics: m.deviceClasses, Names: opts.Names()})
		if err != nil {
			logger.Error(err, "Cannot set up the DeviceClass controller")
		} else {
			factory.Start(ctx.Done())
			wg.Go(func() {
				defer factory.Shutdown()
				if err := ctrl.Run(klog.NewContext(ctx, logger.WithName("deviceclass"))); err != nil && ctx.Err() == nil {
					logger.Error(err, "DeviceClass controller stopped")
				}
			})
		}
	}
	if opts.ComputeDomains && cs.dyn != nil {
		cfg := computedomain.Config{Client: client, Dynamic: cs.dyn, Names: opts.Names(), Namespace: opts.Namespace,
			DaemonImage: opts.ComputeDomainImage, Recorder: recorder, Metrics: m.computeDomains,
			DaemonPodNudgeAfter: opts.ComputeDomainNudgeAfter}
		wg.Go(func() {
			// It waits, without failing, while no ComputeDomain CRD is
			// served: the DeviceClasses above do not depend on it.
			if err := computedomain.Run(klog.NewContext(ctx, logger.WithName("computedomain")), cfg); err != nil && ctx.Err() == nil {
				logger.Error(err, "ComputeDomain controller stopped")
			}
		})
	}
	wg.Wait()
}

// serve runs an HTTP server (HTTPS when holder is set) on ln until ctx is
// done, then shuts it down gracefully.
func serve(ctx context.Context, ln net.Listener, h http.Handler, holder *certs.Holder, base context.Context) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	errCh := make(chan error, 1)
	go func() {
		if holder != nil {
			srv.TLSConfig = holder.TLSConfig()
			errCh <- srv.ServeTLS(ln, "", "")
			return
		}
		errCh <- srv.Serve(ln)
	}()
	select {
	case err := <-errCh:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	}
}

// group runs components; the first failure cancels the others.
type group struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context) *group {
	ctx, cancel := context.WithCancelCause(ctx)
	return &group{ctx: ctx, cancel: cancel}
}

// Go runs fn; an error stops the group.
func (g *group) Go(name string, fn func(context.Context) error) {
	g.wg.Go(func() {
		if err := fn(g.ctx); err != nil {
			g.once.Do(func() { g.err = fmt.Errorf("%s: %w", name, err) })
			g.cancel(err)
		}
	})
}

// Wait waits for every component and returns the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel(nil)
	return g.err
}
