package nvmlsim

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHandleTable(t *testing.T) {
	tab := newHandleTable()
	keys := []key{
		{kind: kindGPU, gpu: 0},
		{kind: kindGPU, gpu: 1},
		{kind: kindMIGDevice, gpu: 0, gi: 1, ci: 0},
		{kind: kindGPUInstance, gpu: 0, gi: 1},
		{kind: kindComputeInstance, gpu: 0, gi: 1, ci: 0},
		{kind: kindEventSet, set: 1},
	}
	seen := map[uintptr]key{}
	for _, k := range keys {
		h := tab.handle(k)
		require.NotZero(t, h)
		require.Zero(t, h%handleStride, "aligned")
		require.NotContains(t, seen, h, "one handle per key")
		seen[h] = k
		require.Equal(t, h, tab.handle(k), "stable")
		got, ok := tab.lookup(h)
		require.True(t, ok)
		require.Equal(t, k, got)
	}
	_, ok := tab.lookup(1)
	require.False(t, ok)

	set := tab.handle(key{kind: kindEventSet, set: 1})
	tab.releaseKey(key{kind: kindEventSet, set: 1})
	_, ok = tab.lookup(set)
	require.False(t, ok, "released")
	require.Equal(t, set, tab.handle(key{kind: kindEventSet, set: 2}), "released handles are reused")
	tab.release(12345) // unknown: nothing happens
}

func TestHandleTableGrowsAndFails(t *testing.T) {
	tab := newHandleTable()
	maps := 0
	tab.mmap = func(size int) ([]byte, error) {
		maps++
		if maps > 2 {
			return nil, errors.New("out of memory")
		}
		return make([]byte, 2*handleStride), nil // two handles per chunk
	}
	var hs []uintptr
	for i := range 4 {
		h := tab.handle(key{kind: kindGPU, gpu: i})
		require.NotZero(t, h, "handle %d", i)
		hs = append(hs, h)
	}
	require.Equal(t, 2, maps)
	require.Equal(t, hs[0]+handleStride, hs[1])
	require.Zero(t, tab.handle(key{kind: kindGPU, gpu: 9}), "no memory: no handle")
}

func TestHandleTableConcurrent(t *testing.T) {
	tab := newHandleTable()
	var wg sync.WaitGroup
	got := make([][]uintptr, 8)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				got[g] = append(got[g], tab.handle(key{kind: kindGPU, gpu: i}))
			}
		}()
	}
	wg.Wait()
	for g := range got {
		require.Equal(t, got[0], got[g], "every goroutine sees the same handles")
	}
}
