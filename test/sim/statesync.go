package sim

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// A real GPU's MIG mode, compute mode and MIG instances live in the driver:
// every process sees what any other one changed, at its next call. So a
// server that keeps its state in a file (PersistTo) shares it with the other
// processes simulating the same node (two plugin instances of a rolling
// update, nvidia-smi, inspect): every call that reads or changes that state
// takes the server's lock, which first brings the state up to date with the
// file, and holds an exclusive lock on the file's lock file (flock) until
// the change is written. A process therefore sees the instances another one
// created or destroyed, cannot create an instance where another one already
// has, and never writes back a state older than the file's.

// stateMu is the Server's lock (Server.mu).
type stateMu struct {
	mu sync.Mutex
	s  *Server
}

// Lock locks the server and, when it shares a state file, that file, and
// takes in what other processes changed.
func (m *stateMu) Lock() {
	m.mu.Lock()
	m.s.syncLocked()
}

// Unlock releases the file's lock and the server.
func (m *stateMu) Unlock() {
	if f := m.s.lockFile; f != nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	}
	m.mu.Unlock()
}

// fileID identifies one version of the state file: every write replaces
// the file (atomicfile), so a new version has a new inode.
type fileID struct {
	dev, ino uint64
	mtime    int64
	size     int64
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("stat %s: no inode", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, mtime: fi.ModTime().UnixNano(), size: fi.Size()}, nil //nolint:unconvert // Dev is not uint64 everywhere
}

// openLockFile opens path's lock file, which serializes the processes that
// share the state file.
func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("simulated NVML state lock: %w", err)
	}
	return f, nil
}

// syncLocked, with m.mu held, locks the state file and reads it again when
// another process replaced it since this server last read or wrote it.
func (s *Server) syncLocked() {
	if s.lockFile == nil {
		return
	}
	if err := unix.Flock(int(s.lockFile.Fd()), unix.LOCK_EX); err != nil {
		klog.Background().Error(err, "Simulated NVML: cannot lock the MIG state file", "path", s.stateFile)
		return
	}
	id, err := statID(s.stateFile)
	if err != nil || id == s.fileID {
		return // removed (the next change writes it again) or unchanged
	}
	s.fileID = id
	st, err := ReadState(s.stateFile)
	if err == nil {
		err = s.mergeLocked(st)
	}
	if err != nil {
		klog.Background().Error(err, "Simulated NVML: cannot take in the MIG state another process wrote; keeping this process's",
			"path", s.stateFile)
	}
}

// mergeLocked makes the server's state st's. Instances that st has as the
// server has them (same ID, profile, placement and UUID) stay the same
// objects, so their handles keep working; the others are destroyed (their
// handles answer ERROR_INVALID_ARGUMENT, as for an instance another process
// destroyed) or created.
func (s *Server) mergeLocked(st *State) error {
	if st.Node != s.nodeName || st.Profile != s.profile.Name || len(st.GPUs) != len(s.devices) {
		return fmt.Errorf("written for node %q, profile %q with %d GPUs, not node %q, profile %q with %d GPUs",
			st.Node, st.Profile, len(st.GPUs), s.nodeName, s.profile.Name, len(s.devices))
	}
	for i, g := range st.GPUs {
		if d := s.devices[i]; g.UUID != d.uuid {
			return fmt.Errorf("GPU %d: UUID %s, the server has %s", i, g.UUID, d.uuid)
		}
	}
	for i, g := range st.GPUs {
		if err := s.devices[i].mergeLocked(g); err != nil {
			return fmt.Errorf("GPU %d: %w", i, err)
		}
	}
	return nil
}

func (d *device) mergeLocked(g GPUState) error {
	d.migMode = migModeOf(g.MIGEnabled)
	d.migPending = d.migMode
	if g.MIGPendingEnabled != nil {
		d.migPending = migModeOf(*g.MIGPendingEnabled)
	}
	d.computeMode = nvml.ComputeMode(g.ComputeMode)
	if len(g.GPUInstances) > 0 && d.model().MIG == nil {
		return fmt.Errorf("not MIG-capable but has GPU instances")
	}
	// Destroy first what st does not have, so that what it has fits.
	want := map[uint32]GPUInstState{}
	for _, gs := range g.GPUInstances {
		want[gs.ID] = gs
	}
	for id, gi := range d.gis {
		gs, ok := want[id]
		if !ok || gs.Profile != gi.prof.Name || gs.Start != int(gi.info.Placement.Start) {
			gi.destroyLocked()
			continue
		}
		gi.dropComputeInstancesLocked(gs.ComputeInstances)
	}
	for _, gs := range g.GPUInstances {
		gi := d.gis[gs.ID]
		if gi == nil {
			p, ok := d.model().MIG.GPUInstanceProfileByName(gs.Profile)
			if !ok {
				return fmt.Errorf("unknown GPU instance profile %q", gs.Profile)
			}
			var ret nvml.Return
			gi, ret = d.createGpuInstanceLocked(p, &nvml.GpuInstancePlacement{Start: uint32(gs.Start), Size: uint32(p.PlacementSize)})
			if ret != nvml.SUCCESS || gi.info.Id != gs.ID {
				return fmt.Errorf("cannot create GPU instance %d (%s at %d): %w", gs.ID, gs.Profile, gs.Start, ret)
			}
		}
		for _, cs := range gs.ComputeInstances {
			if _, ok := gi.cis[cs.ID]; ok {
				continue // kept by dropComputeInstancesLocked: the same
			}
			cp, ok := computeProfile(d.model().MIG, gi.prof, cs.NVMLProfile)
			if !ok {
				return fmt.Errorf("GPU instance %d: unknown compute instance profile %d", gs.ID, cs.NVMLProfile)
			}
			ci, ret := gi.createComputeInstanceLocked(cp, &nvml.ComputeInstancePlacement{Start: uint32(cs.Start), Size: uint32(cp.slices)})
			if ret != nvml.SUCCESS {
				return fmt.Errorf("GPU instance %d: cannot create compute instance %d: %w", gs.ID, cs.ID, ret)
			}
			delete(gi.cis, ci.info.Id)
			ci.info.Id = cs.ID
			gi.cis[cs.ID] = ci
			ci.mig.uuid = cs.UUID
		}
	}
	d.migCounter = g.MIGCounter
	return nil
}

// dropComputeInstancesLocked destroys gi's compute instances that want
// does not have as gi has them.
func (gi *gpuInstance) dropComputeInstancesLocked(want []CompInstState) {
	keep := map[uint32]CompInstState{}
	for _, cs := range want {
		keep[cs.ID] = cs
	}
	for id, ci := range gi.cis {
		cs, ok := keep[id]
		if !ok || cs.NVMLProfile != ci.prof.nvmlProfile || cs.Start != int(ci.info.Placement.Start) || cs.UUID != ci.mig.uuid {
			ci.destroyLocked()
		}
	}
}
