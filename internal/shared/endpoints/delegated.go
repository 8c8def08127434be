package endpoints

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// User is who a bearer token belongs to, as the API server's TokenReview
// answered.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Authenticator tells whose token a request carries: ok is false for a token
// the API server does not accept; err is set when it could not be asked.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (u User, ok bool, err error)
}

// Authorizer tells whether user may do verb on the non-resource URL path,
// with the API server's reason when it may not.
type Authorizer interface {
	Allowed(ctx context.Context, u User, verb, path string) (ok bool, reason string, err error)
}

// cacheSize bounds each cache: a caller sending many distinct tokens evicts
// older answers and costs the API server reviews, not the plugin memory.
const cacheSize = 1024

// delegated asks the API server, through the caller's client: a TokenReview
// per token and a SubjectAccessReview per user and request, each answer
// cached (see the TTLs). It takes client-go's typed clients directly rather
// than k8s.io/apiserver's delegating authenticator and authorizer, whose
// packages (CEL, the API server's configuration types) made the plugin's
// binary 6.4 MB and its idle RSS about 5 MiB larger, for two requests.
type delegated struct {
	client    kubernetes.Interface
	tokens    *cache.LRUExpireCache // sha256 of a token → tokenAnswer
	decisions *cache.LRUExpireCache // JSON of a SubjectAccessReviewSpec → sarAnswer
	backoff   wait.Backoff
}

type tokenAnswer struct {
	user User
	ok   bool
}

type sarAnswer struct {
	ok     bool
	reason string
}

func newDelegated(client kubernetes.Interface) *delegated {
	return &delegated{client: client, tokens: cache.NewLRUExpireCache(cacheSize), decisions: cache.NewLRUExpireCache(cacheSize),
		backoff: wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}}
}

// retry asks again while fn's error is worth it and ctx is not done: the
// API server was busy, timed out, failed inside (429, 5xx) or was not
// reached (no API status at all).
func (d *delegated) retry(ctx context.Context, fn func() error) error {
	return retry.OnError(d.backoff, func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			return true
		}
		code := status.Status().Code
		return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
	}, fn)
}

// Authenticate implements Authenticator. Accepted and rejected tokens are
// cached for authnCacheTTL; a review that failed is not cached.
func (d *delegated) Authenticate(ctx context.Context, token string) (User, bool, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := d.tokens.Get(key); ok {
		a := v.(tokenAnswer)
		return a.user, a.ok, nil
	}
	var got *authenticationv1.TokenReview
	err := d.retry(ctx, func() error {
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		var err error
		got, err = d.client.AuthenticationV1().TokenReviews().Create(ctx,
			&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return User{}, false, fmt.Errorf("TokenReview: %w", err)
	}
	a := tokenAnswer{ok: got.Status.Authenticated}
	if a.ok {
		u := got.Status.User
		a.user = User{Name: u.Username, UID: u.UID, Groups: u.Groups}
		if len(u.Extra) > 0 {
			a.user.Extra = make(map[string][]string, len(u.Extra))
			for k, v := range u.Extra {
				a.user.Extra[k] = v
			}
		}
	}
	d.tokens.Add(key, a, authnCacheTTL)
	return a.user, a.ok, nil
}

// Allowed implements Authorizer. Allowed requests are cached for
// allowCacheTTL, denied ones for denyCacheTTL; a review that failed, or
// that the API server could not evaluate, is not cached.
func (d *delegated) Allowed(ctx context.Context, u User, verb, path string) (bool, string, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{User: u.Name, UID: u.UID, Groups: u.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb}}
	if len(u.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			spec.Extra[k] = v
		}
	}
	key, err := json.Marshal(spec) // map keys sorted: one key per request
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if v, ok := d.decisions.Get(string(key)); ok {
		a := v.(sarAnswer)
		return a.ok, a.reason, nil
	}
	var got *authorizationv1.SubjectAccessReview
	err = d.retry(ctx, func() error {
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		var err error
		got, err = d.client.AuthorizationV1().SubjectAccessReviews().Create(ctx,
			&authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	st := got.Status
	if !st.Allowed && st.EvaluationError != "" {
		return false, "", fmt.Errorf("SubjectAccessReview: the API server could not evaluate it: %s", st.EvaluationError)
	}
	a := sarAnswer{ok: st.Allowed, reason: st.Reason}
	ttl := allowCacheTTL
	if !a.ok {
		ttl = denyCacheTTL
	}
	d.decisions.Add(string(key), a, ttl)
	return a.ok, a.reason, nil
}
