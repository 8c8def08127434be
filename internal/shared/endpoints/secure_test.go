package endpoints

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// fakeAuth accepts the tokens it maps to users and allows the users in allow.
type fakeAuth struct {
	users map[string]string // token → user name
	allow map[string]bool   // user name → may get /metrics
	err   error             // the authorizer's error
}

func (f *fakeAuth) Authenticate(_ context.Context, token string) (User, bool, error) {
	name, ok := f.users[token]
	if !ok {
		return User{}, false, errors.New("invalid bearer token")
	}
	return User{Name: name}, true, nil
}

func (f *fakeAuth) Allowed(_ context.Context, u User, verb, path string) (bool, string, error) {
	if f.err != nil {
		return false, "", f.err
	}
	if f.allow[u.Name] && verb == "get" && path == MetricsPath {
		return true, "", nil
	}
	return false, "no rule", nil
}

func testMux() http.Handler {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gpudra_test_total", Help: "test"})
	reg.MustRegister(c)
	alive := []Check{{Name: "alive", Fn: func(*http.Request) error { return nil }}}
	return NewMux(reg, alive, alive)
}

// serveTLS serves h with a generated certificate and returns its base URL and
// a client that trusts any certificate, as the chart's monitors do.
func serveTLS(t *testing.T, h http.Handler) (string, *http.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg, err := TLSConfig(ctx, ServingCert{Host: "gpudra-test"})
	require.NoError(t, err)
	addr, err := ListenTLS(ctx, "127.0.0.1:0", h, cfg)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed
	return "https://" + addr.String(), client
}

func do(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestProtect(t *testing.T) {
	auth := &fakeAuth{users: map[string]string{"reader": "reader", "other": "other"}, allow: map[string]bool{"reader": true}}
	base, client := serveTLS(t, Protect(testMux(), &Auth{Authenticator: auth, Authorizer: auth}))
	for _, tc := range []struct {
		name, path, token string
		code              int
		body              string
	}{
		{"metrics without a token", "/metrics", "", 401, "Unauthorized"},
		{"metrics with an invalid token", "/metrics", "Bearer nonsense", 401, "Unauthorized"},
		{"metrics of a user without the permission", "/metrics", "Bearer other", 403, `user "other" may not get nonResourceURL "/metrics"`},
		{"metrics of an allowed user", "/metrics", "Bearer reader", 200, "gpudra_test_total 0"},
		{"healthz without a token", "/healthz", "", 200, "[+] alive ok"},
		{"readyz without a token", "/readyz", "", 200, "[+] alive ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, client, base+tc.path, tc.token)
			require.Equal(t, tc.code, code, body)
			require.Contains(t, body, tc.body)
		})
	}

	t.Run("authorizer error", func(t *testing.T) {
		auth.err = errors.New("API server unreachable")
		defer func() { auth.err = nil }()
		code, body := do(t, client, base+"/metrics", "Bearer reader")
		require.Equal(t, 500, code, body)
	})

	t.Run("plain HTTP is refused", func(t *testing.T) {
		code, _ := do(t, http.DefaultClient, "http"+base[len("https"):]+"/healthz", "")
		require.Equal(t, http.StatusBadRequest, code)
	})
}

// fakeAPIServer answers TokenReviews and SubjectAccessReviews as an API
// server would: two known tokens, and only the first user may get /metrics.
// It records the SubjectAccessReviews it was asked.
func fakeAPIServer(t *testing.T) (kubernetes.Interface, *[]authorizationv1.SubjectAccessReviewSpec) {
	t.Helper()
	var mu sync.Mutex
	var sars []authorizationv1.SubjectAccessReviewSpec
	users := map[string]string{"reader-token": "system:serviceaccount:monitoring:prometheus", "other-token": "system:serviceaccount:tenant:app"}
	reply := func(w http.ResponseWriter, obj any) {
		w.Header().Set("Content-Type", "application/json")
		require.NoError(t, json.NewEncoder(w).Encode(obj))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		require.NoError(t, json.NewDecoder(r.Body).Decode(&tr))
		if name, ok := users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: name}}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		reply(w, &tr)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		require.NoError(t, json.NewDecoder(r.Body).Decode(&sar))
		mu.Lock()
		sars = append(sars, sar.Spec)
		mu.Unlock()
		sar.Status.Allowed = sar.Spec.User == users["reader-token"]
		reply(w, &sar)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	require.NoError(t, err)
	return client, &sars
}

// TestDelegatedAuth runs DelegatedAuth's TokenReviews and
// SubjectAccessReviews behind Protect against a fake API server.
func TestDelegatedAuth(t *testing.T) {
	client, sars := fakeAPIServer(t)
	auth, err := DelegatedAuth(client)
	require.NoError(t, err)
	base, httpClient := serveTLS(t, Protect(testMux(), auth))

	for _, tc := range []struct {
		name, path, token string
		code              int
		body              string
	}{
		{"no token", "/metrics", "", 401, "Unauthorized"},
		{"rejected token", "/metrics", "Bearer forged", 401, "Unauthorized"},
		{"token without the permission", "/metrics", "Bearer other-token", 403, "system:serviceaccount:tenant:app"},
		{"token with the permission", "/metrics", "Bearer reader-token", 200, "gpudra_test_total"},
		{"cached answer", "/metrics", "Bearer reader-token", 200, "gpudra_test_total"},
		{"healthz without a token", "/healthz", "", 200, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, httpClient, base+tc.path, tc.token)
			require.Equal(t, tc.code, code, body)
			require.Contains(t, body, tc.body)
		})
	}
	require.Len(t, *sars, 2, "one review per user; the second allowed request is answered from the cache")
	for _, s := range *sars {
		require.Equal(t, &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}, s.NonResourceAttributes)
		require.Nil(t, s.ResourceAttributes)
	}
}

func TestTLSConfigFiles(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("metrics.example", nil, nil)
	require.NoError(t, err)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := TLSConfig(ctx, ServingCert{CertFile: certFile, KeyFile: keyFile})
	require.NoError(t, err)
	addr, err := ListenTLS(ctx, "127.0.0.1:0", testMux(), cfg)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(certPEM))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "metrics.example", MinVersion: tls.VersionTLS12}}}
	code, _ := do(t, client, "https://"+addr.String()+"/healthz", "")
	require.Equal(t, 200, code, "the file's certificate is served")

	for _, tc := range []struct {
		name string
		c    ServingCert
		want string
	}{
		{"certificate without key", ServingCert{CertFile: certFile}, "give both"},
		{"missing files", ServingCert{CertFile: filepath.Join(dir, "no.crt"), KeyFile: keyFile}, "must be PEM files"},
		{"not a key pair", ServingCert{CertFile: certFile, KeyFile: certFile}, "must be PEM files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := TLSConfig(ctx, tc.c)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
