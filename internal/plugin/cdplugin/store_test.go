package cdplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// TestRecordsLock: the records' lock, taken through two records of one
// plugin dir (two instances of the plugin, or two calls of one), is held by
// one at a time; the other waits until it is released, or until its
// context ends.
func TestRecordsLock(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	first, second := newRecords(dir, "node-a"), newRecords(dir, "node-a")
	unlock, err := first.Lock(ctx)
	require.NoError(t, err)
	locked := make(chan func())
	go func() {
		unlock, err := second.Lock(ctx)
		assert.NoError(t, err)
		locked <- unlock
	}()
	select {
	case <-locked:
		t.Fatal("the lock was taken twice")
	case <-time.After(200 * time.Millisecond):
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = newRecords(dir, "node-a").Lock(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, filepath.Join(dir, lockFile))
	unlock()
	select {
	case unlock := <-locked:
		unlock()
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not taken after its release")
	}

	_, err = newRecords(filepath.Join(dir, "missing"), "node-a").Lock(ctx)
	require.ErrorContains(t, err, "is the plugin directory writable?")
}

// domainMap is a computedomain.DomainGetter over a map.
type domainMap map[string]*v1alpha1.ComputeDomain

func (m domainMap) GetDomain(_ context.Context, uid string) (*v1alpha1.ComputeDomain, error) {
	if cd, ok := m[uid]; ok {
		return cd.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.ComputeDomainResource}, uid)
}

// slowRecords are records on a slow disk: each write and removal takes
// 2ms more, which widens the races the records' lock closes.
type slowRecords struct{ records }

func (r slowRecords) Put(ctx context.Context, c computedomain.PreparedClaim) error {
	time.Sleep(2 * time.Millisecond)
	return r.records.Put(ctx, c)
}

func (r slowRecords) Remove(ctx context.Context, uid types.UID) error {
	time.Sleep(2 * time.Millisecond)
	return r.records.Remove(ctx, uid)
}

// TestLabelFollowsRecordsAcrossInstances runs the prepares and unprepares
// of one domain's claims through two instances' Nodes on one plugin dir,
// racing each other, with a slow disk and API server (each read of the
// node takes a millisecond more): the node carries the domain's label
// exactly while a claim's record holds it, and the records are the claims
// not unprepared.
func TestLabelFollowsRecordsAcrossInstances(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "1"}})
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		time.Sleep(time.Millisecond)
		return false, nil, nil
	})
	cds := domainMap{"u1": {ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cd", UID: "u1"}}}
	var nodes [2]*computedomain.Node
	for i := range nodes {
		var err error
		nodes[i], err = computedomain.NewNode(computedomain.Config{NodeName: "node-a", Names: names, Client: client, Domains: cds,
			Channels: &computedomain.Channels{Dev: t.TempDir(), Major: fakedriver.IMEXChannelsMajor}, DaemonNamespace: "gpudra",
			DomainsDir: filepath.Join(dir, "domains"), Store: slowRecords{newRecords(dir, "node-a")}})
		require.NoError(t, err)
	}
	// each runs f(i) for i in [0, n) concurrently.
	each := func(n int, f func(i int)) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { f(i) })
		}
		wg.Wait()
	}
	uid := func(i int) string { return fmt.Sprintf("c%02d", i) }

	const claims = 16
	each(claims, func(i int) {
		// Labelled, waiting for the daemon: the claim holds the label.
		_, err := nodes[i%2].Prepare(ctx, allocatedClaim(t, "team", uid(i), uid(i), "channel", "channel-0", names.ChannelConfigKind))
		assert.ErrorIs(t, err, computedomain.ErrDaemonNotReady)
		if i%2 == 0 { // unprepared through the other instance
			assert.NoError(t, nodes[(i+1)%2].Unprepare(ctx, typesUID(uid(i))))
		}
	})
	var odd []computedomain.PreparedClaim
	for i := 1; i < claims; i += 2 {
		odd = append(odd, computedomain.PreparedClaim{UID: typesUID(uid(i)), Kind: computedomain.TypeChannel, DomainID: "u1"})
	}
	require.Equal(t, odd, prepared(t, ctx, nodes[0]))
	node, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "u1", node.Labels[names.Label], "the odd claims hold the label")

	each(len(odd), func(i int) { assert.NoError(t, nodes[i%2].Unprepare(ctx, odd[i].UID)) })
	require.Empty(t, prepared(t, ctx, nodes[1]))
	node, err = client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, node.Labels, names.Label, "the last claim's unprepare, through either instance, took it away")
	_, err = os.Stat(filepath.Join(dir, lockFile))
	require.NoError(t, err, "the lock's file is in the plugin dir")
}

// BenchmarkUnprepareReads measures what an unprepare reads of the records
// under their lock: the lock, the claim's record and every record (for
// whether another claim of the domain remains), at 10 to 1000 records.
func BenchmarkUnprepareReads(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			_, ctx := ktesting.NewTestContext(b)
			r := newRecords(b.TempDir(), "node-a")
			for i := range n {
				require.NoError(b, r.put(computedomain.PreparedClaim{UID: typesUID(fmt.Sprintf("c%04d", i)), Kind: computedomain.TypeChannel, DomainID: "u1"}))
			}
			for b.Loop() {
				unlock, err := r.Lock(ctx)
				require.NoError(b, err)
				_, ok, err := r.Claim(ctx, "c0000")
				require.True(b, ok)
				require.NoError(b, err)
				claims, err := r.Claims(ctx)
				require.NoError(b, err)
				require.Len(b, claims, n)
				unlock()
			}
		})
	}
}
