package endpoints

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"Bearer abc", "abc"},
		{"bearer abc", "abc"},
		{"  Bearer   abc  ", "abc"},
		{"Bearer", ""},
		{"Bearer ", ""},
		{"Basic abc", ""},
		{"abc", ""},
		{"", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		require.Equal(t, tc.want, bearerToken(r), "%q", tc.header)
	}
}

// The handler behind Protect never sees the caller's token.
func TestProtectDropsTheToken(t *testing.T) {
	auth := &fakeAuth{users: map[string]string{"reader": "reader"}, allow: map[string]bool{"reader": true}}
	var seen []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = append(seen, r.Header.Get("Authorization")) })
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, MetricsPath, nil)
	r.Header.Set("Authorization", "Bearer reader")
	Protect(h, &Auth{Authenticator: auth, Authorizer: auth}).ServeHTTP(rec, r)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, []string{""}, seen)
}

// reviewServer is an API server whose TokenReview and SubjectAccessReview
// answers a test scripts: each answer function gets the request's number
// (from 1) and returns an HTTP status and the object's status.
type reviewServer struct {
	mu       sync.Mutex
	tokens   int
	sars     int
	tokenFn  func(n int, token string) (int, authenticationv1.TokenReviewStatus)
	accessFn func(n int, spec authorizationv1.SubjectAccessReviewSpec) (int, authorizationv1.SubjectAccessReviewStatus)
}

func (s *reviewServer) counts() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens, s.sars
}

func (s *reviewServer) start(t *testing.T) kubernetes.Interface {
	t.Helper()
	reply := func(w http.ResponseWriter, code int, obj any) {
		w.Header().Set("Content-Type", "application/json")
		if code != http.StatusCreated {
			obj = &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Code: int32(code), Reason: metav1.StatusReasonUnknown, Message: "scripted failure"}
		}
		w.WriteHeader(code)
		require.NoError(t, json.NewEncoder(w).Encode(obj))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		require.NoError(t, json.NewDecoder(r.Body).Decode(&tr))
		s.mu.Lock()
		s.tokens++
		n := s.tokens
		s.mu.Unlock()
		code, st := s.tokenFn(n, tr.Spec.Token)
		tr.Status = st
		reply(w, code, &tr)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		require.NoError(t, json.NewDecoder(r.Body).Decode(&sar))
		s.mu.Lock()
		s.sars++
		n := s.sars
		s.mu.Unlock()
		code, st := s.accessFn(n, sar.Spec)
		sar.Status = st
		reply(w, code, &sar)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	require.NoError(t, err)
	return client
}

func quickDelegated(client kubernetes.Interface) *delegated {
	d := newDelegated(client)
	d.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 5}
	return d
}

func TestDelegatedAuthenticate(t *testing.T) {
	ctx := context.Background()
	ok := func(int, string) (int, authenticationv1.TokenReviewStatus) {
		return http.StatusCreated, authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
			Username: "u", UID: "1", Groups: []string{"g"}, Extra: map[string]authenticationv1.ExtraValue{"scope": {"a"}}}}
	}
	for _, tc := range []struct {
		name    string
		fn      func(n int, token string) (int, authenticationv1.TokenReviewStatus)
		want    bool
		wantErr bool
		reviews int // after two calls with the same token
	}{
		{"accepted, then cached", ok, true, false, 1},
		{"rejected, then cached", func(int, string) (int, authenticationv1.TokenReviewStatus) {
			return http.StatusCreated, authenticationv1.TokenReviewStatus{Error: "token expired"}
		}, false, false, 1},
		{"busy twice, then accepted", func(n int, tok string) (int, authenticationv1.TokenReviewStatus) {
			if n <= 2 {
				return http.StatusTooManyRequests, authenticationv1.TokenReviewStatus{}
			}
			return ok(n, tok)
		}, true, false, 3},
		{"failing inside, not cached", func(int, string) (int, authenticationv1.TokenReviewStatus) {
			return http.StatusServiceUnavailable, authenticationv1.TokenReviewStatus{}
		}, false, true, 10},
		{"forbidden, not retried", func(int, string) (int, authenticationv1.TokenReviewStatus) {
			return http.StatusForbidden, authenticationv1.TokenReviewStatus{}
		}, false, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &reviewServer{tokenFn: tc.fn}
			d := quickDelegated(srv.start(t))
			for range 2 {
				u, got, err := d.Authenticate(ctx, "the-token")
				require.Equal(t, tc.wantErr, err != nil, "%v", err)
				require.Equal(t, tc.want, got)
				if tc.want {
					require.Equal(t, User{Name: "u", UID: "1", Groups: []string{"g"}, Extra: map[string][]string{"scope": {"a"}}}, u)
				}
			}
			reviews, _ := srv.counts()
			require.Equal(t, tc.reviews, reviews)
		})
	}
}

func TestDelegatedAllowed(t *testing.T) {
	ctx := context.Background()
	user := User{Name: "u", UID: "1", Groups: []string{"g"}, Extra: map[string][]string{"scope": {"a"}}}
	for _, tc := range []struct {
		name    string
		fn      func(n int, spec authorizationv1.SubjectAccessReviewSpec) (int, authorizationv1.SubjectAccessReviewStatus)
		want    bool
		wantErr bool
		reviews int // after two calls
	}{
		{"allowed, then cached", func(_ int, spec authorizationv1.SubjectAccessReviewSpec) (int, authorizationv1.SubjectAccessReviewStatus) {
			want := authorizationv1.SubjectAccessReviewSpec{User: "u", UID: "1", Groups: []string{"g"},
				Extra:                 map[string]authorizationv1.ExtraValue{"scope": {"a"}},
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}
			if !apiEqual(want, spec) {
				return http.StatusCreated, authorizationv1.SubjectAccessReviewStatus{Reason: "unexpected review"}
			}
			return http.StatusCreated, authorizationv1.SubjectAccessReviewStatus{Allowed: true}
		}, true, false, 1},
		{"denied, then cached", func(int, authorizationv1.SubjectAccessReviewSpec) (int, authorizationv1.SubjectAccessReviewStatus) {
			return http.StatusCreated, authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "no"}
		}, false, false, 1},
		{"not evaluated, not cached", func(int, authorizationv1.SubjectAccessReviewSpec) (int, authorizationv1.SubjectAccessReviewStatus) {
			return http.StatusCreated, authorizationv1.SubjectAccessReviewStatus{EvaluationError: "webhook down"}
		}, false, true, 2},
		{"failing inside twice, then allowed", func(n int, _ authorizationv1.SubjectAccessReviewSpec) (int, authorizationv1.SubjectAccessReviewStatus) {
			if n <= 2 {
				return http.StatusInternalServerError, authorizationv1.SubjectAccessReviewStatus{}
			}
			return http.StatusCreated, authorizationv1.SubjectAccessReviewStatus{Allowed: true}
		}, true, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &reviewServer{accessFn: tc.fn}
			d := quickDelegated(srv.start(t))
			for range 2 {
				got, _, err := d.Allowed(ctx, user, "get", MetricsPath)
				require.Equal(t, tc.wantErr, err != nil, "%v", err)
				require.Equal(t, tc.want, got)
			}
			_, reviews := srv.counts()
			require.Equal(t, tc.reviews, reviews)
		})
	}
	// Another verb or user is another question.
	srv := &reviewServer{accessFn: func(int, authorizationv1.SubjectAccessReviewSpec) (int, authorizationv1.SubjectAccessReviewStatus) {
		return http.StatusCreated, authorizationv1.SubjectAccessReviewStatus{Allowed: true}
	}}
	d := quickDelegated(srv.start(t))
	for _, q := range []struct {
		u    User
		verb string
	}{{user, "get"}, {user, "post"}, {User{Name: "v"}, "get"}, {user, "get"}} {
		_, _, err := d.Allowed(ctx, q.u, q.verb, MetricsPath)
		require.NoError(t, err)
	}
	_, reviews := srv.counts()
	require.Equal(t, 3, reviews)
}

func apiEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// A rotated Secret (new files swapped in) is served at the next handshake;
// a pair that does not load keeps the last good one.
func TestTLSConfigReloads(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair := func(host string) {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		require.NoError(t, err)
		for file, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
			tmp := file + ".new"
			require.NoError(t, os.WriteFile(tmp, data, 0o600))
			require.NoError(t, os.Rename(tmp, file))
		}
	}
	writePair("first.example")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := TLSConfig(ctx, ServingCert{CertFile: certFile, KeyFile: keyFile})
	require.NoError(t, err)
	addr, err := ListenTLS(ctx, "127.0.0.1:0", testMux(), cfg)
	require.NoError(t, err)
	served := func() string {
		conn, err := tls.Dial("tcp", addr.String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate only
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	require.Contains(t, served(), "first.example")

	writePair("second.example")
	require.Contains(t, served(), "second.example")

	require.NoError(t, os.WriteFile(keyFile, []byte("not a key"), 0o600))
	require.Contains(t, served(), "second.example", "a broken pair replaced the last good one")

	writePair("third.example")
	require.Contains(t, served(), "third.example")
}
