package controller

import (
	"context"
	"errors"
	"github.com/gpudra/gpudra/internal/shared/endpoints"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/envflag"
)

func defaultOptions(t *testing.T, args ...string) *Options {
	t.Helper()
	o := &Options{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse(args))
	require.NoError(t, envflag.Apply(fs, os.LookupEnv, EnvVars...))
	return o
}

func TestFlagsAndEnv(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "gpudra-system")
	t.Setenv("KUBECONFIG", "/etc/kubeconfig")
	o := defaultOptions(t)
	require.NoError(t, o.Validate())
	assert.Equal(t, "gpudra-system", o.Namespace)
	assert.Equal(t, "gpudra-system", o.leaseNamespace())
	assert.Equal(t, "/etc/kubeconfig", o.Kubeconfig)
	assert.Equal(t, 9443, o.WebhookPort)
	assert.Equal(t, 8080, o.MetricsPort)
	assert.Equal(t, CertModeSelfManaged, o.CertMode)
	assert.True(t, o.LeaderElect)
	assert.True(t, o.PerModelClasses)
	assert.Equal(t, DefaultMaxDerivedClasses, o.MaxDerivedClasses)
	assert.Equal(t, 5*time.Second, o.ComputeDomainNudgeAfter)
	assert.Empty(t, o.ExtendedResourceName)
	assert.Equal(t, compat.Default(), o.Names())

	o = defaultOptions(t, "--compatibility=nvidia")
	require.NoError(t, o.Validate())
	assert.Equal(t, "gpu.nvidia.com", o.Names().Driver)
	assert.Equal(t, "mig.nvidia.com", o.Names().MIGClass)

	o = defaultOptions(t, "--namespace=other", "--leader-elect-lease-namespace=kube-system",
		"--extended-resource-name=nvidia.com/gpu", "--cert-mode=files", "--cert-file=a", "--key-file=b")
	require.NoError(t, o.Validate())
	assert.Equal(t, "kube-system", o.leaseNamespace())
	assert.Equal(t, "nvidia.com/gpu", o.ExtendedResourceName)
	assert.False(t, o.usesSecret())
}

func TestValidate(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--namespace="}, wantErr: "--namespace (or $POD_NAMESPACE) is required"},
		{args: []string{"--webhook-port=0"}, wantErr: "--webhook-port=0: must be a port"},
		{args: []string{"--max-derived-classes=-1"}, wantErr: "--max-derived-classes=-1: must be 0 (no limit) or positive"},
		{args: []string{"--compute-domain-daemon-nudge-after=-1s"}, wantErr: "--compute-domain-daemon-nudge-after=-1s: must be 0 (no nudges) or positive"},
		{args: []string{"--compute-domain-daemon-nudge-after=0"}},
		{args: []string{"--metrics-port=9443"}, wantErr: "must differ"},
		{args: []string{"--kube-api-qps=0"}, wantErr: "must be positive"},
		{args: []string{"--cert-mode=acme"}, wantErr: `--cert-mode="acme": must be one of [self-managed secret files]`},
		{args: []string{"--cert-mode=files"}, wantErr: "--cert-mode=files needs --cert-file and --key-file"},
		{args: []string{"--cert-mode=secret", "--cert-secret-name="}, wantErr: "--cert-secret-name is required with --cert-mode=secret"},
		{args: []string{"--cert-secret-name="}, wantErr: "--cert-secret-name is required with --cert-mode=self-managed"},
		{args: []string{"--cert-rotate-before=9000h"}, wantErr: "shorter than --cert-validity"},
		{args: []string{"--cert-check-interval=0"}, wantErr: "--cert-check-interval=0s must be positive"},
		{args: []string{"--webhook-service-name="}, wantErr: "--webhook-service-name is required"},
		{args: []string{"--leader-elect-renew-deadline=20s"}, wantErr: "lease-duration (15s) > --leader-elect-renew-deadline (20s)"},
		{args: []string{"--leader-elect-retry-period=9s"}, wantErr: "1.2 × --leader-elect-retry-period (9s)"},
		{args: []string{"--leader-elect=false", "--leader-elect-retry-period=9s"}},
		{args: []string{"--cert-mode=secret", "--cert-rotate-before=9000h"}},
		{args: []string{"--cert-extra-sans=127.0.0.1,::1,wh.example.com,*.example.com"}},
		{args: []string{"--compatibility=amd"}, wantErr: `--compatibility="amd" is not supported`},
		{args: []string{"--compatibility=nvidia", "--driver-name=gpu.example.com"}, wantErr: `--driver-name="gpu.example.com" cannot be used with --compatibility=nvidia`},
		{args: []string{"--cert-extra-sans=127.0.0.1,Bad_Name"}, wantErr: `--cert-extra-sans: "Bad_Name" is neither an IP address nor a DNS name`},
	}
	for _, tc := range tests {
		t.Run(tc.wantErr, func(t *testing.T) {
			o := defaultOptions(t, append([]string{"--namespace=ns"}, tc.args...)...)
			err := o.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestHealthEndpoints(t *testing.T) {
	ready := false
	mux := endpoints.NewMux(prometheus.NewRegistry(),
		[]endpoints.Check{{Name: "ping", Fn: func(*http.Request) error { return nil }}},
		[]endpoints.Check{endpoints.BoolCheck("certificate", func() bool { return ready }, "no certificate yet")})
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code, w.Body.String()
	}
	code, body := get("/healthz")
	assert.Equal(t, 200, code)
	assert.Equal(t, "[+] ping ok\nok\n", body)
	code, body = get("/readyz")
	assert.Equal(t, 500, code)
	assert.Equal(t, "[-] certificate: no certificate yet\nnot ok\n", body)
	ready = true
	code, _ = get("/readyz")
	assert.Equal(t, 200, code)
	code, _ = get("/metrics")
	assert.Equal(t, 200, code)
}

func TestGroupStopsOnFirstError(t *testing.T) {
	g := newGroup(t.Context())
	boom := errors.New("boom")
	g.Go("waiter", func(ctx context.Context) error { <-ctx.Done(); return nil })
	g.Go("failer", func(context.Context) error { time.Sleep(10 * time.Millisecond); return boom })
	err := g.Wait()
	require.ErrorIs(t, err, boom)
	assert.Equal(t, "failer: boom", err.Error())
}
