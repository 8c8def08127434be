package endpoints

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
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
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
}

// DelegatedAuth returns an Auth that asks the API server: a TokenReview for
// the bearer token and a SubjectAccessReview for the request, with the
// answers cached. The caller's ServiceAccount needs create on
// authentication.k8s.io/tokenreviews and
// authorization.k8s.io/subjectaccessreviews.
func DelegatedAuth(client kubernetes.Interface) (*Auth, error) {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      &backoff,
		CacheTTL:                 authnCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("set up TokenReview authentication for /metrics: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("set up SubjectAccessReview authorization for /metrics: %w", err)
	}
	return &Auth{Authenticator: authn, Authorizer: authz}, nil
}

// Protect answers MetricsPath only to authenticated and authorized callers:
// 401 without a valid bearer token (a TokenReview that fails counts as one),
// 403 when its user may not "get" /metrics, 500 when the SubjectAccessReview
// fails. Every other path of h is served as it is.
func Protect(h http.Handler, auth *Auth) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != MetricsPath {
			h.ServeHTTP(w, r)
			return
		}
		logger := klog.FromContext(r.Context())
		resp, ok, err := auth.Authenticator.AuthenticateRequest(r)
		if err != nil {
			logger.V(4).Info("Metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
		}
		if !ok {
			// An invalid token is an error here too; only a review that
			// could not be made would deserve a 500, and the authenticator
			// does not tell those apart.
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpudra metrics"`)
			http.Error(w, "Unauthorized: send a ServiceAccount or user token as \"Authorization: Bearer <token>\"", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{
			User:            resp.User,
			Verb:            strings.ToLower(r.Method),
			Path:            r.URL.Path,
			ResourceRequest: false,
		}
		decision, reason, err := auth.Authorizer.Authorize(r.Context(), attrs)
		if err != nil {
			logger.Error(err, "Cannot authorize a metrics request", "user", resp.User.GetName())
			http.Error(w, "Internal error: the API server could not authorize the request", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			logger.V(4).Info("Metrics request forbidden", "user", resp.User.GetName(), "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s nonResourceURL %q; bind it to a ClusterRole "+
				"that allows it (the chart's <fullname>-kubelet-plugin-metrics-reader)", resp.User.GetName(), attrs.Verb, attrs.Path), http.StatusForbidden)
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

// TLSConfig returns a server configuration (TLS 1.2 or later) that serves c
// and keeps serving its newest content until ctx is done.
func TLSConfig(ctx context.Context, c ServingCert) (*tls.Config, error) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("metrics serving certificate: give both the certificate file (%q) and the key file (%q), or neither for a self-signed one",
			c.CertFile, c.KeyFile)
	}
	var content dynamiccertificates.CertKeyContentProvider
	var files *dynamiccertificates.DynamicCertKeyPairContent
	if c.CertFile != "" {
		var err error
		files, err = dynamiccertificates.NewDynamicServingContentFromFiles("metrics-serving-certificate", c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load the metrics serving certificate %s and key %s: %w (they must be PEM files that form a key pair)",
				c.CertFile, c.KeyFile, err)
		}
		content = files
	} else {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{
			Host: c.Host, MaxAge: selfSignedValidity})
		if err != nil {
			return nil, fmt.Errorf("generate a self-signed metrics serving certificate: %w", err)
		}
		if content, err = dynamiccertificates.NewStaticCertKeyContent("self-signed-metrics-certificate", certPEM, keyPEM); err != nil {
			return nil, fmt.Errorf("load the self-signed metrics serving certificate: %w", err)
		}
	}
	ctrl := dynamiccertificates.NewDynamicServingCertificateController(&tls.Config{MinVersion: tls.VersionTLS12}, nil, content, nil, nil)
	if err := ctrl.RunOnce(); err != nil {
		return nil, fmt.Errorf("serve the metrics certificate: %w", err)
	}
	if files != nil {
		files.AddListener(ctrl)
		go files.Run(ctx, 1)
	}
	go ctrl.Run(1, ctx.Done())
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: ctrl.GetConfigForClient}, nil
}
