package fmsim

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

// Library is the state of the simulated libnvfm behind its C functions. The
// C structs are go-nvfm's Go types (the same layout: go-nvfm passes
// pointers to them to the C functions).
type Library struct {
	// Getenv reads the live process environment; SelfPaths the library's
	// own file names (both as in nvmlsim).
	Getenv    func(string) string
	SelfPaths func() []string

	mu          sync.Mutex
	initialized bool
	fabric      *Fabric
	conns       map[uintptr]string // handle -> the socket path it connected to
	free        []uintptr
	next, end   uintptr
}

// New returns the library; nothing is read before fmLibInit.
func New(getenv func(string) string, selfPaths func() []string) *Library {
	return &Library{Getenv: getenv, SelfPaths: selfPaths, conns: map[uintptr]string{}}
}

// Init is fmLibInit: it finds the fake driver root and loads its fabric.
// IN_USE when already initialized (nv_fm_agent.h: the library is not
// reference-counted; go-nvfm counts per library object).
func (l *Library) Init() nvfm.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.initialized {
		return nvfm.IN_USE
	}
	root, err := nvmlsim.FindRoot(l.Getenv(nvmlsim.RootEnv), l.SelfPaths())
	if err == nil {
		l.fabric, err = LoadFabric(root)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpudra simulated libnvfm: fmLibInit failed: %v\n", err)
		return nvfm.GENERIC_ERROR
	}
	l.initialized = true
	return nvfm.SUCCESS
}

// Shutdown is fmLibShutdown; it closes every connection.
func (l *Library) Shutdown() nvfm.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.initialized {
		return nvfm.UNINITIALIZED
	}
	for h := range l.conns {
		delete(l.conns, h)
		l.free = append(l.free, h)
	}
	l.initialized, l.fabric = false, nil
	return nvfm.SUCCESS
}

// Connect is fmConnect: params is an fmConnectParams_t (version 2), out
// receives the handle.
func (l *Library) Connect(params unsafe.Pointer, out unsafe.Pointer) nvfm.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.initialized {
		return nvfm.UNINITIALIZED
	}
	if params == nil || out == nil {
		return nvfm.BADPARAM
	}
	p := (*nvfm.ConnectParams)(params)
	if p.Version != nvfm.ConnectParamsVersion {
		return nvfm.VERSION_MISMATCH
	}
	unix := p.AddressIsUnixSocket != 0 || p.AddressType == nvfm.ADDR_TYPE_UNIX
	address := cString(p.AddressInfo[:])
	if address == "" {
		return nvfm.BADPARAM
	}
	if ret := Reachable(address, unix); ret != nvfm.SUCCESS {
		return ret
	}
	h := l.allocLocked()
	if h == 0 {
		return nvfm.GENERIC_ERROR
	}
	l.conns[h] = address
	*(*uintptr)(out) = h
	return nvfm.SUCCESS
}

// Disconnect is fmDisconnect.
func (l *Library) Disconnect(h uintptr) nvfm.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.initialized {
		return nvfm.UNINITIALIZED
	}
	if _, ok := l.conns[h]; !ok {
		return nvfm.BADPARAM
	}
	delete(l.conns, h)
	l.free = append(l.free, h)
	return nvfm.SUCCESS
}

// onConnection runs f with the fabric of connection h while the daemon
// still answers on its socket.
func (l *Library) onConnection(h uintptr, f func(*Fabric) nvfm.Return) nvfm.Return {
	l.mu.Lock()
	fabric, address, ok := l.fabric, l.conns[h], false
	if l.initialized {
		_, ok = l.conns[h]
	}
	initialized := l.initialized
	l.mu.Unlock()
	switch {
	case !initialized:
		return nvfm.UNINITIALIZED
	case !ok:
		return nvfm.BADPARAM
	}
	if ret := Reachable(address, true); ret != nvfm.SUCCESS {
		return ret
	}
	return f(fabric)
}

// GetSupportedFabricPartitions is fmGetSupportedFabricPartitions; list is
// an fmFabricPartitionList_t.
func (l *Library) GetSupportedFabricPartitions(h uintptr, list unsafe.Pointer) nvfm.Return {
	return l.onConnection(h, func(f *Fabric) nvfm.Return {
		if list == nil {
			return nvfm.BADPARAM
		}
		out := (*nvfm.FabricPartitionList)(list)
		if out.Version != nvfm.FabricPartitionListVersion {
			return nvfm.VERSION_MISMATCH
		}
		parts, active, ret := f.Supported()
		if ret != nvfm.SUCCESS {
			return ret
		}
		if len(parts) > len(out.PartitionInfo) {
			return nvfm.GENERIC_ERROR
		}
		out.NumPartitions = uint32(len(parts))
		out.MaxNumPartitions = uint32(len(out.PartitionInfo))
		for i, p := range parts {
			info := &out.PartitionInfo[i]
			*info = nvfm.FabricPartitionInfo{PartitionId: uint32(p.ID), NumGpus: uint32(len(p.GPUs))}
			if active[i] {
				info.IsActive = 1
			}
			for j, g := range p.GPUs {
				gi := &info.GpuInfo[j]
				gi.PhysicalId = uint32(g.Module)
				setCString(gi.Uuid[:], g.UUID)
				setCString(gi.PciBusId[:], g.PCIBusID)
				gi.NumNvLinksAvailable, gi.MaxNumNvLinks = nvlinksPerGPU, nvlinksPerGPU
			}
		}
		return nvfm.SUCCESS
	})
}

// nvlinksPerGPU is an H100's NVLink count; the line rate is not modelled (0).
const nvlinksPerGPU = 18

// ActivateFabricPartition is fmActivateFabricPartition.
func (l *Library) ActivateFabricPartition(h uintptr, id uint32) nvfm.Return {
	return l.onConnection(h, func(f *Fabric) nvfm.Return { return f.Activate(int(id)) })
}

// ActivateFabricPartitionWithVFs is fmActivateFabricPartitionWithVFs, the
// vGPU model's call: not simulated (NOT_SUPPORTED, as a Fabric Manager in
// shared NVSwitch mode is assumed to answer; not checked).
func (l *Library) ActivateFabricPartitionWithVFs(h uintptr, _ uint32) nvfm.Return {
	return l.onConnection(h, func(*Fabric) nvfm.Return { return nvfm.NOT_SUPPORTED })
}

// DeactivateFabricPartition is fmDeactivateFabricPartition.
func (l *Library) DeactivateFabricPartition(h uintptr, id uint32) nvfm.Return {
	return l.onConnection(h, func(f *Fabric) nvfm.Return { return f.Deactivate(int(id)) })
}

// SetActivatedFabricPartitions is fmSetActivatedFabricPartitions; list is
// an fmActivatedFabricPartitionList_t.
func (l *Library) SetActivatedFabricPartitions(h uintptr, list unsafe.Pointer) nvfm.Return {
	return l.onConnection(h, func(f *Fabric) nvfm.Return {
		if list == nil {
			return nvfm.BADPARAM
		}
		in := (*nvfm.ActivatedFabricPartitionList)(list)
		if in.Version != nvfm.ActivatedFabricPartitionListVersion {
			return nvfm.VERSION_MISMATCH
		}
		if int(in.NumPartitions) > len(in.PartitionIds) {
			return nvfm.BADPARAM
		}
		ids := make([]int, in.NumPartitions)
		for i := range ids {
			ids[i] = int(in.PartitionIds[i])
		}
		return f.SetActivated(ids)
	})
}

// GetNvlinkFailedDevices is fmGetNvlinkFailedDevices: no failed NVLink
// (what real FM always answers on HGX H100, nv_fm_agent.h).
func (l *Library) GetNvlinkFailedDevices(h uintptr, devices unsafe.Pointer) nvfm.Return {
	return l.onConnection(h, func(*Fabric) nvfm.Return {
		if devices == nil {
			return nvfm.BADPARAM
		}
		out := (*nvfm.NvlinkFailedDevices)(devices)
		if out.Version != nvfm.NvlinkFailedDevicesVersion {
			return nvfm.VERSION_MISMATCH
		}
		out.NumGpus, out.NumSwitches = 0, 0
		return nvfm.SUCCESS
	})
}

// GetUnsupportedFabricPartitions is fmGetUnsupportedFabricPartitions: none
// (no GPU or NVSwitch of the simulated fabric fails).
func (l *Library) GetUnsupportedFabricPartitions(h uintptr, list unsafe.Pointer) nvfm.Return {
	return l.onConnection(h, func(f *Fabric) nvfm.Return {
		if list == nil {
			return nvfm.BADPARAM
		}
		out := (*nvfm.UnsupportedFabricPartitionList)(list)
		if out.Version != nvfm.UnsupportedFabricPartitionListVersion {
			return nvfm.VERSION_MISMATCH
		}
		if _, _, ret := f.Supported(); ret != nvfm.SUCCESS {
			return ret
		}
		out.NumPartitions = 0
		return nvfm.SUCCESS
	})
}

// allocLocked hands out a connection handle: an address in an anonymous
// read-only mapping that is never freed (as nvmlsim's handles), never a Go
// pointer; 0 when nothing can be mapped.
func (l *Library) allocLocked() uintptr {
	if n := len(l.free); n > 0 {
		h := l.free[n-1]
		l.free = l.free[:n-1]
		return h
	}
	if l.next == l.end {
		const size = 64 << 10
		chunk, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return 0
		}
		l.next = uintptr(unsafe.Pointer(&chunk[0]))
		l.end = l.next + size
	}
	h := l.next
	l.next += 16
	return h
}

// cString reads a NUL-terminated C string from a fixed array.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// setCString writes s NUL-terminated into b, truncated to fit.
func setCString(b []int8, s string) {
	n := min(len(s), len(b)-1)
	for i := range n {
		b[i] = int8(s[i])
	}
	b[n] = 0
}
