package computedomain

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Store holds the claims a Node prepared, the one answer to "which claims
// of this domain does the node still hold". During a rolling update two
// plugin processes of one node share a Store (records on disk) and the
// kubelet may send a claim's unprepare to either, so Node keeps no claims of
// its own: every decision on a domain's label or node list reads the Store
// under its Lock.
type Store interface {
	// Lock takes the store's lock, which one caller holds at a time, in
	// this process and in every other process that shares the store;
	// unlock releases it. Not reentrant.
	Lock(ctx context.Context) (unlock func(), err error)
	// Claim returns the claim of uid, and false when none is held.
	Claim(ctx context.Context, uid types.UID) (PreparedClaim, bool, error)
	// Claims returns every claim held, sorted by UID.
	Claims(ctx context.Context) ([]PreparedClaim, error)
	// Put records c (durably: a crash keeps it); Remove drops the claim
	// of uid, and none held is removed already.
	Put(ctx context.Context, c PreparedClaim) error
	Remove(ctx context.Context, uid types.UID) error
}

// MemoryStore is a Store in this process's memory: for a single process
// that need not remember its claims across a restart (tests). The zero
// value is empty and ready.
type MemoryStore struct {
	lock   sync.Mutex // Lock's
	mu     sync.Mutex // claims'
	claims map[types.UID]PreparedClaim
}

var _ Store = (*MemoryStore)(nil)

// Lock implements Store.
func (m *MemoryStore) Lock(context.Context) (func(), error) {
	m.lock.Lock()
	return m.lock.Unlock, nil
}

// Claim implements Store.
func (m *MemoryStore) Claim(_ context.Context, uid types.UID) (PreparedClaim, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.claims[uid]
	return c, ok, nil
}

// Claims implements Store.
func (m *MemoryStore) Claims(context.Context) ([]PreparedClaim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.SortedFunc(maps.Values(m.claims), func(a, b PreparedClaim) int {
		return strings.Compare(string(a.UID), string(b.UID))
	}), nil
}

// Put implements Store.
func (m *MemoryStore) Put(_ context.Context, c PreparedClaim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.claims == nil {
		m.claims = map[types.UID]PreparedClaim{}
	}
	m.claims[c.UID] = c
	return nil
}

// Remove implements Store.
func (m *MemoryStore) Remove(_ context.Context, uid types.UID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.claims, uid)
	return nil
}
