package controller

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// check is one named health or readiness condition; nil means healthy.
type check struct {
	name string
	fn   func(*http.Request) error
}

// newHealthMux serves /metrics from reg, /healthz from the liveness checks and
// /readyz from the readiness checks. A failing check answers 500 and lists
// every check with its state.
func newHealthMux(reg prometheus.Gatherer, live, ready []check) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", checksHandler(live))
	mux.Handle("/readyz", checksHandler(ready))
	return mux
}

func checksHandler(checks []check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.fn(r); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-] %s: %v\n", c.name, err)
				continue
			}
			fmt.Fprintf(&b, "[+] %s ok\n", c.name)
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

// boolCheck turns a condition into a check with a fixed failure message.
func boolCheck(name string, ok func() bool, failure string) check {
	return check{name: name, fn: func(*http.Request) error {
		if ok() {
			return nil
		}
		return fmt.Errorf("%s", failure)
	}}
}
