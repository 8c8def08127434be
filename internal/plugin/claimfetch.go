package plugin

import (
	"context"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/util/watchlist"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"

	"google.golang.org/grpc"
)

// The helper's claim reads are issued concurrently per call and without the
// client-side rate limit, and stay consistent reads; nothing is cached.
// Design and measurements: docs/design/claim-fetch.md.

// claimGetFunc reads one claim.
type claimGetFunc func(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error)

// withClaimGet returns client with ResourceV1().ResourceClaims(ns).Get
// replaced by get; everything else goes to client unchanged.
func withClaimGet(client kubernetes.Interface, get claimGetFunc) kubernetes.Interface {
	return &claimClientset{Interface: client, get: get}
}

type claimClientset struct {
	kubernetes.Interface
	get claimGetFunc
}

func (c *claimClientset) ResourceV1() resourcev1.ResourceV1Interface {
	return claimsV1{ResourceV1Interface: c.Interface.ResourceV1(), get: c.get}
}

// IsWatchListSemanticsUnSupported forwards what the wrapped client says
// (fake clientsets do not support watch-list; informers ask via this method).
func (c *claimClientset) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.Interface)
}

type claimsV1 struct {
	resourcev1.ResourceV1Interface
	get claimGetFunc
}

func (c claimsV1) ResourceClaims(namespace string) resourcev1.ResourceClaimInterface {
	return claimGetter{ResourceClaimInterface: c.ResourceV1Interface.ResourceClaims(namespace), namespace: namespace, get: c.get}
}

type claimGetter struct {
	resourcev1.ResourceClaimInterface
	namespace string
	get       claimGetFunc
}

func (g claimGetter) Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
	return g.get(ctx, g.namespace, name, opts)
}

// unthrottledClaims reads claims with claims (a client without client-side
// rate limit) and leaves every other call to client.
func unthrottledClaims(client kubernetes.Interface, claims resourcev1.ResourceV1Interface) kubernetes.Interface {
	return withClaimGet(client, func(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
		return claims.ResourceClaims(namespace).Get(ctx, name, opts)
	})
}

// maxConcurrentClaimGets bounds the reads one call issues at once.
const maxConcurrentClaimGets = 16

// claimFetcher reads all claims of one NodePrepareResources call
// concurrently. Install intercept as a gRPC interceptor and pass Client() to
// the helper: the helper's GETs then return the results fetched for its call.
type claimFetcher struct {
	client kubernetes.Interface
	// metrics times the calls and the claim reads; nil: not timed.
	metrics *pluginMetrics
}

type fetchedKey struct{}

type fetchResult struct {
	claim *resourceapi.ResourceClaim
	err   error
}

// Client is the client for the helper.
func (f *claimFetcher) Client() kubernetes.Interface {
	return withClaimGet(f.client, f.get)
}

func (f *claimFetcher) get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
	if fetched, ok := ctx.Value(fetchedKey{}).(map[types.NamespacedName]fetchResult); ok && opts.ResourceVersion == "" {
		if r, ok := fetched[types.NamespacedName{Namespace: namespace, Name: name}]; ok {
			return r.claim, r.err
		}
	}
	return f.read(ctx, namespace, name, opts)
}

// read is one claim GET from the API server, timed.
func (f *claimFetcher) read(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
	start := time.Now()
	claim, err := f.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, opts)
	f.metrics.claimRead(start)
	return claim, err
}

// Intercept is a grpc.UnaryServerInterceptor: for a prepare call with more
// than one claim it reads them all concurrently, with the same consistent
// GET the helper would issue, before the helper's handler runs.
// Every call is timed as a whole.
func (f *claimFetcher) Intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info != nil {
		defer f.metrics.call(info.FullMethod, time.Now())
	}
	if refs := prepareRefs(req); len(refs) > 1 {
		ctx = context.WithValue(ctx, fetchedKey{}, f.fetchAll(ctx, refs))
	}
	return handler(ctx, req)
}

func (f *claimFetcher) fetchAll(ctx context.Context, refs []types.NamespacedName) map[types.NamespacedName]fetchResult {
	results := make(map[types.NamespacedName]fetchResult, len(refs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConcurrentClaimGets)
	for _, ref := range refs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			claim, err := f.read(ctx, ref.Namespace, ref.Name, metav1.GetOptions{})
			mu.Lock()
			results[ref] = fetchResult{claim: claim, err: err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return results
}

// prepareRefs lists the distinct claims of a NodePrepareResources request
// (the helper serves v1 and v1beta1); nil for any other call.
func prepareRefs(req any) []types.NamespacedName {
	var refs []types.NamespacedName
	add := func(namespace, name string) {
		ref := types.NamespacedName{Namespace: namespace, Name: name}
		for _, r := range refs {
			if r == ref {
				return
			}
		}
		refs = append(refs, ref)
	}
	switch r := req.(type) {
	case *drapbv1.NodePrepareResourcesRequest:
		for _, c := range r.GetClaims() {
			add(c.GetNamespace(), c.GetName())
		}
	case *drapbv1beta1.NodePrepareResourcesRequest:
		for _, c := range r.GetClaims() {
			add(c.GetNamespace(), c.GetName())
		}
	}
	return refs
}
