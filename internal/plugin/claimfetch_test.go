package plugin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/watchlist"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
)

func claimsClient(t *testing.T, names ...string) *fake.Clientset {
	client := fake.NewClientset()
	for _, n := range names {
		_, err := client.ResourceV1().ResourceClaims("ns").Create(context.Background(),
			&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n, UID: k8stypes.UID("uid-" + n)}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return client
}

// countGets counts claim GETs that reach the API client.
func countGets(client *fake.Clientset) *atomic.Int32 {
	var n atomic.Int32
	client.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		return false, nil, nil
	})
	return &n
}

// helperGets does what the kubelet-plugin helper does in the handler: one
// GET per claim of the request through the client it was given.
func helperGets(f *claimFetcher, names ...string) func(ctx context.Context, _ any) (any, error) {
	return func(ctx context.Context, _ any) (any, error) {
		var got []string
		for _, n := range names {
			c, err := f.Client().ResourceV1().ResourceClaims("ns").Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return got, err
			}
			got = append(got, string(c.UID))
		}
		return got, nil
	}
}

func v1Request(names ...string) *drapbv1.NodePrepareResourcesRequest {
	req := &drapbv1.NodePrepareResourcesRequest{}
	for _, n := range names {
		req.Claims = append(req.Claims, &drapbv1.Claim{Namespace: "ns", Name: n, Uid: "uid-" + n})
	}
	return req
}

func TestClaimFetcher(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      any
		names    []string // what the handler GETs
		wantGets int32    // GETs that reached the API
		wantErr  bool
	}{
		{name: "one claim: the helper's own GET", req: v1Request("a"), names: []string{"a"}, wantGets: 1},
		{name: "three claims: fetched once each, up front", req: v1Request("a", "b", "c"), names: []string{"a", "b", "c"}, wantGets: 3},
		{name: "duplicates are fetched once", req: v1Request("a", "a", "b"), names: []string{"a", "a", "b"}, wantGets: 2},
		{name: "v1beta1 request", req: &drapbv1beta1.NodePrepareResourcesRequest{Claims: []*drapbv1beta1.Claim{
			{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}}}, names: []string{"a", "b"}, wantGets: 2},
		{name: "missing claim: the helper sees NotFound", req: v1Request("a", "gone"), names: []string{"a", "gone"}, wantGets: 2, wantErr: true},
		{name: "unprepare: not intercepted", req: &drapbv1.NodeUnprepareResourcesRequest{}, names: nil, wantGets: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := claimsClient(t, "a", "b", "c")
			gets := countGets(client)
			f := &claimFetcher{client: client}
			got, err := f.Intercept(context.Background(), tc.req, nil, helperGets(f, tc.names...))
			if tc.wantErr {
				require.True(t, apierrors.IsNotFound(err), "got %v", err)
			} else {
				require.NoError(t, err)
				var want []string
				for _, n := range tc.names {
					want = append(want, "uid-"+n)
				}
				if want == nil {
					want = []string{}
				}
				require.ElementsMatch(t, want, got)
			}
			require.Equal(t, tc.wantGets, gets.Load())
		})
	}
}

// The claims of one call are read concurrently: every GET waits until all of
// them are in flight, which only happens if none waits for another.
func TestClaimFetcherConcurrent(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	api := claimsClient(t, names...)
	var inFlight sync.WaitGroup
	inFlight.Add(len(names))
	all := make(chan struct{})
	go func() { inFlight.Wait(); close(all) }()
	// The fake clientset runs reactors under one lock, so block outside it.
	client := withClaimGet(api, func(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
		inFlight.Done()
		select {
		case <-all:
			return api.ResourceV1().ResourceClaims(namespace).Get(ctx, name, opts)
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("GETs were issued one after the other")
		}
	})
	f := &claimFetcher{client: client}
	got, err := f.Intercept(context.Background(), v1Request(names...), nil, helperGets(f, names...))
	require.NoError(t, err)
	require.Len(t, got, len(names))
}

// Prefetched results are only used for the plain GET the helper issues.
func TestClaimFetcherOtherReadsGoToTheAPI(t *testing.T) {
	client := claimsClient(t, "a", "b")
	gets := countGets(client)
	f := &claimFetcher{client: client}
	_, err := f.Intercept(context.Background(), v1Request("a", "b"), nil, func(ctx context.Context, _ any) (any, error) {
		return f.Client().ResourceV1().ResourceClaims("ns").Get(ctx, "a", metav1.GetOptions{ResourceVersion: "0"})
	})
	require.NoError(t, err)
	require.Equal(t, int32(3), gets.Load())
}

func TestUnthrottledClaims(t *testing.T) {
	main := claimsClient(t, "a")
	claims := claimsClient(t, "a")
	mainGets, claimGets := countGets(main), countGets(claims)
	client := unthrottledClaims(main, claims.ResourceV1())
	ctx := context.Background()
	_, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	_, err = client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	_, err = client.ResourceV1().ResourceClaims("ns").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, int32(0), mainGets.Load())
	require.Equal(t, int32(1), claimGets.Load())
	require.Len(t, main.Actions(), 3, "claim and slice lists go to the main client (plus its create)")
	// Informers of the wrapped fake must still know it lacks watch-list support.
	require.True(t, watchlist.DoesClientNotSupportWatchListSemantics(client))
}
