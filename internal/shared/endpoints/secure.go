package endpoints

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// MetricsPath is the one path Protect guards; /healthz and /readyz stay
// open because the kubelet's probes carry no token.
const MetricsPath = "/metrics"

// Cache lifetimes of the API server's answers, as kube-rbac-proxy and the
// Kubernetes components' delegated authentication use them: a scraper asks
// every 15-60 s, so one review per token and minute at most.
const (
	authnCacheTTL = 2 * time.Minute
	allowCacheTTL = 5 * time.Minute
	denyCacheTTL  = 30 * time.Second
	reviewTimeout = 10 * time.Second
)

// selfSignedValidity is the lifetime of the generated certificate. Its key
// exists only in the process's memory and no one can verify it against a
// CA, so a long lifetime costs nothing and a plugin pod that runs for more
// than a year does not present an expired certificate.
const selfSignedValidity = 10 * 365 * 24 * time.Hour

// Auth decides who may read /metrics: Authenticator checks the request's
// bearer token, Authorizer whether its user may "get" the non-resource URL
// /metrics.
type Auth struct {
	Authenticator Authenticator
	Authorizer    Authorizer
}

// DelegatedAuth returns an Auth that asks the API server: a TokenReview for
// the bearer token and a SubjectAccessReview for the request, with the
// answers cached. The caller's ServiceAccount needs create on
// authentication.k8s.io/tokenreviews and
// authorization.k8s.io/subjectaccessreviews.
func DelegatedAuth(client kubernetes.Interface) (*Auth, error) {
	if client == nil {
		return nil, errors.New("authenticate /metrics requests: no Kubernetes client")
	}
	d := newDelegated(client)
	return &Auth{Authenticator: d, Authorizer: d}, nil
}

// bearerToken is the token of an "Authorization: Bearer <token>" header;
// "" without one.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// Protect answers MetricsPath only to authenticated and authorized callers:
// 401 without a valid bearer token (a TokenReview that fails counts as one),
// 403 when its user may not "get" /metrics, 500 when the SubjectAccessReview
// fails. The token is taken off the request before h sees it. Every other
// path of h is served as it is.
func Protect(h http.Handler, auth *Auth) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != MetricsPath {
			h.ServeHTTP(w, r)
			return
		}
		logger := klog.FromContext(r.Context())
		var u User
		ok := false
		if token := bearerToken(r); token != "" {
			var err error
			if u, ok, err = auth.Authenticator.Authenticate(r.Context(), token); err != nil {
				logger.V(4).Info("Metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
			}
		}
		if !ok {
			// A review that could not be made is answered as an invalid
			// token: the caller retries at its next scrape either way.
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpudra metrics"`)
			http.Error(w, "Unauthorized: send a ServiceAccount or user token as \"Authorization: Bearer <token>\"", http.StatusUnauthorized)
			return
		}
		r.Header.Del("Authorization")
		verb := strings.ToLower(r.Method)
		allowed, reason, err := auth.Authorizer.Allowed(r.Context(), u, verb, r.URL.Path)
		if err != nil {
			logger.Error(err, "Cannot authorize a metrics request", "user", u.Name)
			http.Error(w, "Internal error: the API server could not authorize the request", http.StatusInternalServerError)
			return
		}
		if !allowed {
			logger.V(4).Info("Metrics request forbidden", "user", u.Name, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s nonResourceURL %q; bind it to a ClusterRole "+
				"that allows it (the chart's <fullname>-kubelet-plugin-metrics-reader)", u.Name, verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServingCert is where the TLS certificate comes from: CertFile and KeyFile
// (PEM, reloaded when they change) or, when both are empty, a self-signed
// certificate for Host generated in memory.
type ServingCert struct {
	CertFile string
	KeyFile  string
	Host     string
}

// TLSConfig returns a server configuration (TLS 1.2 or later) that serves
// c: the files' newest pair (read again at a handshake after either file
// changed; a pair that does not load is logged and the last good one kept
// until ctx is done), or the self-signed certificate.
func TLSConfig(ctx context.Context, c ServingCert) (*tls.Config, error) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("metrics serving certificate: give both the certificate file (%q) and the key file (%q), or neither for a self-signed one",
			c.CertFile, c.KeyFile)
	}
	if c.CertFile == "" {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{
			Host: c.Host, MaxAge: selfSignedValidity})
		if err != nil {
			return nil, fmt.Errorf("generate a self-signed metrics serving certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load the self-signed metrics serving certificate: %w", err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
	}
	files := &certFiles{ctx: ctx, certFile: c.CertFile, keyFile: c.KeyFile}
	if err := files.load(); err != nil {
		return nil, fmt.Errorf("load the metrics serving certificate %s and key %s: %w (they must be PEM files that form a key pair)",
			c.CertFile, c.KeyFile, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: files.get}, nil
}
