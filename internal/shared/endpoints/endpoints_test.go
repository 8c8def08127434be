package endpoints

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gpudra_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	ready := false
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Listen(ctx, "127.0.0.1:0", NewMux(reg,
		[]Check{{Name: "alive", Fn: func(*http.Request) error { return nil }}},
		[]Check{BoolCheck("synced", func() bool { return ready }, "not synced yet"),
			{Name: "other", Fn: func(*http.Request) error { return errors.New("boom") }}}))
	require.NoError(t, err)
	base := "http://" + addr.String()

	code, body := get(t, base+"/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "gpudra_test_total 1")
	code, body = get(t, base+"/healthz")
	require.Equal(t, 200, code)
	require.Contains(t, body, "[+] alive ok")
	code, body = get(t, base+"/readyz")
	require.Equal(t, 500, code)
	require.Contains(t, body, "[-] synced: not synced yet")
	require.Contains(t, body, "[-] other: boom")

	_, err = Listen(ctx, addr.String(), http.NewServeMux())
	require.ErrorContains(t, err, "choose another address")
}
