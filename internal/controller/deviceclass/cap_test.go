package deviceclass

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// derivedClasses counts the per-model and per-profile classes in the
// cluster.
func (h *harness) derivedClasses() int {
	list, err := h.client.ResourceV1().DeviceClasses().List(context.Background(), metav1.ListOptions{})
	require.NoError(h.t, err)
	n := 0
	for _, c := range list.Items {
		if c.Labels[ModelLabel] == "true" {
			n++
		}
	}
	return n
}

func TestDerivedClassCap(t *testing.T) {
	for _, tc := range []struct {
		name        string
		max         int
		models      int
		wantClasses int
		wantCapped  float64
	}{
		{"below the cap", 3, 2, 2, 0},
		{"at the cap", 2, 2, 2, 0},
		{"above the cap", 2, 5, 2, 3},
		{"no cap", 0, 5, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			for i := range tc.models {
				objs = append(objs, slice(fmt.Sprintf("node-%d", i), GPUClassName, fmt.Sprintf("NVIDIA Model %d", i)))
			}
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			require.NoError(t, err)
			h := start(t, Options{PerModelClasses: true, MaxDerivedClasses: tc.max, Metrics: m}, objs...)
			require.Eventually(t, func() bool {
				return h.derivedClasses() == tc.wantClasses && testutil.ToFloat64(m.capped) == tc.wantCapped
			}, waitFor, tick, "want %d classes and %v capped", tc.wantClasses, tc.wantCapped)
			time.Sleep(200 * time.Millisecond)
			require.Equal(t, tc.wantClasses, h.derivedClasses(), "no class beyond the cap appears later")
		})
	}
}

// A class freed below the cap (its model gone) makes room for a capped one.
func TestDerivedClassCapFreed(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	a, b := slice("node-a", GPUClassName, h100), slice("node-b", GPUClassName, l4)
	h := start(t, Options{PerModelClasses: true, MaxDerivedClasses: 1, Metrics: m}, a, b)
	require.Eventually(t, func() bool { return h.derivedClasses() == 1 && testutil.ToFloat64(m.capped) == 1 }, waitFor, tick)
	first, gone := h100Class, "node-a"
	if _, err := h.get(h100Class); err != nil {
		first, gone = l4Class, "node-b"
	}
	require.NoError(t, h.client.ResourceV1().ResourceSlices().Delete(context.Background(), gone, metav1.DeleteOptions{}))
	h.waitGone(first)
	other := map[string]string{h100Class: l4Class, l4Class: h100Class}[first]
	h.waitClass(other)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.capped) == 0 }, waitFor, tick)
	require.Equal(t, 1, h.derivedClasses())
}
