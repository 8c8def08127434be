// Package endpoints serves the HTTP endpoints both gpudra binaries expose:
// Prometheus /metrics, /healthz (liveness) and /readyz (readiness).
package endpoints

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Check is one named health or readiness condition; a nil error is healthy.
type Check struct {
	Name string
	Fn   func(*http.Request) error
}

// BoolCheck turns a condition into a Check with a fixed failure message.
func BoolCheck(name string, ok func() bool, failure string) Check {
	return Check{Name: name, Fn: func(*http.Request) error {
		if ok() {
			return nil
		}
		return errors.New(failure)
	}}
}

// NewMux serves /metrics from reg, /healthz from the liveness checks and
// /readyz from the readiness checks. A failing check answers 500 and lists
// every check with its state.
func NewMux(reg prometheus.Gatherer, live, ready []Check) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", checksHandler(live))
	mux.Handle("/readyz", checksHandler(ready))
	return mux
}

func checksHandler(checks []Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.Fn(r); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-] %s: %v\n", c.Name, err)
				continue
			}
			fmt.Fprintf(&b, "[+] %s ok\n", c.Name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusInternalServerError)
			b.WriteString("not ok\n")
		} else {
			b.WriteString("ok\n")
		}
		_, _ = w.Write([]byte(b.String()))
	})
}

// Listen binds addr now (so a port conflict fails start-up with a clear
// error) and serves h over plain HTTP until ctx is done.
func Listen(ctx context.Context, addr string, h http.Handler) (net.Addr, error) {
	return ListenTLS(ctx, addr, h, nil)
}

// ListenTLS is Listen over TLS with cfg (see TLSConfig); a nil cfg serves
// plain HTTP.
func ListenTLS(ctx context.Context, addr string, h http.Handler, cfg *tls.Config) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics and health on %q: %w (choose another address)", addr, err)
	}
	if cfg != nil {
		l = tls.NewListener(l, cfg)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }} // for the logger
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics and health server stopped", "address", l.Addr().String())
		}
	}()
	return l.Addr(), nil
}
