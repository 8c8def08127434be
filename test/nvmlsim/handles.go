package nvmlsim

import (
	"sync"
	"syscall"
)

// NVML handles (nvmlDevice_t, nvmlGpuInstance_t, ...) are opaque pointers
// to the caller. The library hands out addresses inside anonymous memory
// mappings it never frees: they are never Go pointers, never collide with
// either Go runtime's heap, and C code that dereferences one reads zeros
// instead of faulting.
//
// Real NVML keeps a GPU's handle across nvmlShutdown and nvmlInit, and
// nvcdi relies on it (it takes device handles in one Init/Shutdown session
// and uses them in the next). The sim's objects, though, are rebuilt at
// every first nvmlInit. So a handle names a stable key (GPU index; GPU,
// GPU instance and compute instance IDs) and is resolved to the current
// sim object at each call.

type handleKind uint8

const (
	kindGPU handleKind = iota + 1
	kindMIGDevice
	kindGPUInstance
	kindComputeInstance
	kindEventSet
	kindGPMSample
)

// key identifies what a handle stands for.
type key struct {
	kind handleKind
	gpu  int    // GPU index
	gi   uint32 // GPU instance ID
	ci   uint32 // compute instance ID
	set  uint64 // event set or GPM sample serial number
}

const (
	// handleStride is the distance between two handles.
	handleStride = 16
	// chunkSize is the size of one mapping: 4096 handles.
	chunkSize = 64 << 10
)

// handleTable maps keys to handles and back. Safe for concurrent use.
type handleTable struct {
	mu     sync.Mutex
	byKey  map[key]uintptr
	byAddr map[uintptr]key
	free   []uintptr // released handles (event sets), reused first
	chunks [][]byte  // every mapping, kept for the life of the process
	next   uintptr   // next unused address in the last chunk
	end    uintptr
	mmap   func(size int) ([]byte, error)
}

func newHandleTable() *handleTable {
	return &handleTable{byKey: map[key]uintptr{}, byAddr: map[uintptr]key{}, mmap: anonMap}
}

func anonMap(size int) ([]byte, error) {
	return syscall.Mmap(-1, 0, size, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
}

// handle returns the handle of k, allocating one the first time; 0 when
// no memory can be mapped.
func (t *handleTable) handle(k key) uintptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.byKey[k]; ok {
		return h
	}
	h := t.allocLocked()
	if h == 0 {
		return 0
	}
	t.byKey[k] = h
	t.byAddr[h] = k
	return h
}

func (t *handleTable) allocLocked() uintptr {
	if n := len(t.free); n > 0 {
		h := t.free[n-1]
		t.free = t.free[:n-1]
		return h
	}
	if t.next == t.end {
		chunk, err := t.mmap(chunkSize)
		if err != nil || len(chunk) < handleStride {
			return 0
		}
		t.chunks = append(t.chunks, chunk)
		t.next = addrOf(chunk)
		t.end = t.next + uintptr(len(chunk))/handleStride*handleStride
	}
	h := t.next
	t.next += handleStride
	return h
}

// lookup returns the key of handle h.
func (t *handleTable) lookup(h uintptr) (key, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok := t.byAddr[h]
	return k, ok
}

// release forgets h so that its address can name another key.
func (t *handleTable) release(h uintptr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok := t.byAddr[h]
	if !ok {
		return
	}
	delete(t.byAddr, h)
	delete(t.byKey, k)
	t.free = append(t.free, h)
}

// releaseKey releases the handle of k, if it has one.
func (t *handleTable) releaseKey(k key) {
	t.mu.Lock()
	h, ok := t.byKey[k]
	t.mu.Unlock()
	if ok {
		t.release(h)
	}
}
