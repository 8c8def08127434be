package deviceclass

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReconcileMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{nil, nil, errors.New("conflict")} {
		m.observe(time.Now(), err)
	}
	var none *Metrics
	none.observe(time.Now(), nil) // a nil *Metrics records nothing and does not panic
	for result, want := range map[string]float64{"success": 2, "error": 1} {
		if got := testutil.ToFloat64(m.total.WithLabelValues(result)); got != want {
			t.Errorf("%s reconciles = %v, want %v", result, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Errorf("duration histogram: %d series", n)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering twice must fail")
	}
}
