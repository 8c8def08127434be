package computedomain

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// faultyStore is a MemoryStore whose writes, removals or listings fail
// while the matching error is set; onPut runs before each write.
type faultyStore struct {
	MemoryStore
	put, remove, list error
	onPut             func(c PreparedClaim)
}

func (s *faultyStore) Put(ctx context.Context, c PreparedClaim) error {
	if s.onPut != nil {
		s.onPut(c)
	}
	if s.put != nil {
		return s.put
	}
	return s.MemoryStore.Put(ctx, c)
}

func (s *faultyStore) Remove(ctx context.Context, uid types.UID) error {
	if s.remove != nil {
		return s.remove
	}
	return s.MemoryStore.Remove(ctx, uid)
}

func (s *faultyStore) Claims(ctx context.Context) ([]PreparedClaim, error) {
	if s.list != nil {
		return nil, s.list
	}
	return s.MemoryStore.Claims(ctx)
}

// A channel claim's record is written before the label, and the store's
// failures leave the claim and the label consistent: the claim is held
// (recorded) exactly when its prepare or unprepare can still be retried.
func TestStoreFailures(t *testing.T) {
	errDisk := errors.New("disk full")
	c1 := PreparedClaim{UID: "c1", Kind: TypeChannel, DomainID: "u1"}
	for _, tc := range []struct {
		name string
		// held: c1 recorded before; labels: the node's before.
		held   bool
		labels map[string]string
		// fail sets the store's failures before the call.
		fail    func(s *faultyStore)
		unprep  bool // the call is Unprepare (else Prepare)
		wantErr error
		// wantHeld: c1 recorded after; wantLabel: the node's label after.
		wantHeld  bool
		wantLabel string
	}{
		{name: "record not written", fail: func(s *faultyStore) { s.put = errDisk }, wantErr: errDisk},
		{name: "label of another domain: record taken back", labels: map[string]string{label: "u9"},
			wantErr: errors.New("already belongs to ComputeDomain u9"), wantLabel: "u9"},
		{name: "label of another domain, recorded before: record kept", held: true, labels: map[string]string{label: "u9"},
			wantErr: errors.New("already belongs to ComputeDomain u9"), wantHeld: true, wantLabel: "u9"},
		{name: "unprepare, record not removed: retried", held: true, labels: map[string]string{label: "u1"}, unprep: true,
			fail: func(s *faultyStore) { s.remove = errDisk }, wantErr: errDisk, wantHeld: true},
		{name: "unprepare, records not listed: label kept", held: true, labels: map[string]string{label: "u1"}, unprep: true,
			fail: func(s *faultyStore) { s.list = errDisk }, wantErr: errDisk, wantHeld: true, wantLabel: "u1"},
		{name: "unprepare", held: true, labels: map[string]string{label: "u1"}, unprep: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
			n, client := testNode(t, cds, nil, tc.labels)
			store := &faultyStore{}
			n.cfg.Store = store
			ctx := context.Background()
			if tc.held {
				restore(t, n, c1)
			}
			store.onPut = func(PreparedClaim) {
				assert.Equal(t, tc.labels[label], nodeLabels(t, client)[label], "the record is written before the label")
			}
			if tc.fail != nil {
				tc.fail(store)
			}
			var err error
			if tc.unprep {
				err = n.Unprepare(ctx, c1.UID)
			} else {
				_, err = n.Prepare(ctx, channelClaim(t, "team", c1.UID, "channel-0", channelCfg("u1", "")))
			}
			switch {
			case tc.wantErr == nil:
				require.NoError(t, err)
			case errors.Is(tc.wantErr, errDisk):
				require.ErrorIs(t, err, errDisk)
			default:
				require.ErrorContains(t, err, tc.wantErr.Error())
			}
			store.put, store.remove, store.list, store.onPut = nil, nil, nil, nil
			_, held, err := store.Claim(ctx, c1.UID)
			require.NoError(t, err)
			assert.Equal(t, tc.wantHeld, held, "c1 recorded")
			assert.Equal(t, tc.wantLabel, nodeLabels(t, client)[label])
			if held && tc.unprep {
				require.NoError(t, n.Unprepare(ctx, c1.UID), "the kubelet's retry")
				assert.Empty(t, prepared(t, n))
				assert.NotContains(t, nodeLabels(t, client), label)
			}
		})
	}
}
