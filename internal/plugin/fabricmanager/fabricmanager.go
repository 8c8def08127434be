// Package fabricmanager talks to NVSwitch Fabric Manager (FM) in shared
// NVSwitch mode (FABRIC_MODE=1), through NVIDIA's go-nvfm and the driver
// root's libnvfm.so: it reads the partitions FM offers (each a set of GPUs
// named by their module IDs, nvmlDeviceGetModuleId) and activates and
// deactivates them for the prepare manager. It is used only with
// --fabric-manager-partitioning (NVIDIA's FabricManagerPartitioning gate).
//
// One go-nvfm library object serves the process (fmLibInit answers IN_USE
// to a second one); each call opens its own connection to the daemon, so a
// restarted nvidia-fabricmanager is found again. Changes of the fabric are
// serialized within the process and, with Options.LockFile, across the
// plugin processes of the node (a rolling update): FM's fabric is
// node-global, and "is it active? then activate" must not interleave.
//
// Tested only against the simulated libnvfm (test/fmsim), never on a real
// NVSwitch system.
package fabricmanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
)

// The connection settings NVIDIA's driver reads from its environment.
const (
	// AddressEnv selects TCP (FM's default port) at this host; set but
	// empty, at DefaultAddress.
	AddressEnv = "NVIDIA_FABRICMANAGER_ADDRESS"
	// UnixSocketEnv replaces the unix socket path (when AddressEnv is not
	// set); empty: the default.
	UnixSocketEnv = "NVIDIA_FABRICMANAGER_UNIX_SOCKET"
	// DefaultAddress is the TCP host when AddressEnv is set but empty.
	DefaultAddress = "127.0.0.1"
	// SocketPath is the daemon's unix socket, relative to the driver root.
	SocketPath = "run/nvidia-fabricmanager/socket"
)

// LibraryNames are the names of FM's client library, searched for in the
// driver root's library directories (nvmllib.LibrarySearchDirs) in order.
var LibraryNames = []string{"libnvfm.so.1", "libnvfm.so"}

// Partition is one partition FM offers: its ID and the module IDs of its
// GPUs, in ascending order.
type Partition struct {
	ID      int
	Modules []int
}

// Options of Open.
type Options struct {
	// DriverRoot is where libnvfm.so and the default socket are looked for,
	// as this process sees it (--nvidia-driver-root).
	DriverRoot string
	// LibraryPath, if set, is the library to load instead of searching.
	LibraryPath string
	// LockFile, if set, is a file whose flock serializes changes of the
	// fabric across the plugin processes of the node.
	LockFile string
	// LookupEnv reads the connection settings; os.LookupEnv when nil.
	LookupEnv func(string) (string, bool)
}

// Manager is an open connection to FM's library and what FM offered at
// Open. Its methods are safe for concurrent use.
type Manager struct {
	lib        nvfm.Interface
	connect    []nvfm.ConnectOption
	where      string
	lockFile   string
	partitions []Partition
	mu         sync.Mutex
	closed     bool
}

// shared is the process's one go-nvfm library object.
var shared struct {
	sync.Mutex
	lib   nvfm.Interface
	path  string
	users int
}

func acquire(path string) (nvfm.Interface, error) {
	shared.Lock()
	defer shared.Unlock()
	if shared.users > 0 && shared.path != path {
		return nil, fmt.Errorf("this process already uses Fabric Manager's library %s, not %s", shared.path, path)
	}
	if shared.lib == nil || shared.path != path {
		shared.lib, shared.path = nvfm.New(nvfm.WithLibraryPath(path)), path
	}
	if ret := shared.lib.Init(); ret != nvfm.SUCCESS {
		return nil, fmt.Errorf("fmLibInit of %s: %w", path, ret)
	}
	shared.users++
	return shared.lib, nil
}

func release() error {
	shared.Lock()
	defer shared.Unlock()
	if shared.users == 0 {
		return nil
	}
	shared.users--
	if ret := shared.lib.Shutdown(); ret != nvfm.SUCCESS {
		return fmt.Errorf("fmLibShutdown: %w", ret)
	}
	return nil
}

// connectOptions are where FM listens, as NVIDIA's driver decides it: TCP
// when AddressEnv is set, else the unix socket of UnixSocketEnv or the
// driver root's.
func connectOptions(driverRoot string, lookup func(string) (string, bool)) ([]nvfm.ConnectOption, string) {
	if addr, ok := lookup(AddressEnv); ok {
		if addr == "" {
			addr = DefaultAddress
		}
		return []nvfm.ConnectOption{nvfm.WithAddress(addr)}, "TCP " + addr + " (" + AddressEnv + ")"
	}
	socket := filepath.Join(driverRoot, SocketPath)
	if s, ok := lookup(UnixSocketEnv); ok && s != "" {
		return []nvfm.ConnectOption{nvfm.WithUnixSocket(s)}, "unix socket " + s + " (" + UnixSocketEnv + ")"
	}
	return []nvfm.ConnectOption{nvfm.WithUnixSocket(socket)}, "unix socket " + socket
}

// fix is what an operator does when FM cannot be used.
const fix = "run nvidia-fabricmanager on the node in shared NVSwitch mode (FABRIC_MODE=1 in fabricmanager.cfg), " +
	"point the plugin at it (" + UnixSocketEnv + " or " + AddressEnv + "), or turn Fabric Manager partitioning off " +
	"(--fabric-manager-partitioning=false, chart kubeletPlugin.fabricManagerPartitioning)"

// Open loads FM's library, connects to the daemon and reads its partitions.
// Every failure says what to fix.
func Open(ctx context.Context, o Options) (*Manager, error) {
	lookup := o.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	path := o.LibraryPath
	if path == "" {
		var err error
		if path, err = nvmllib.FindInRoot(o.DriverRoot, LibraryNames...); err != nil {
			return nil, fmt.Errorf("NVSwitch Fabric Manager partitioning is on, but its client library is missing (%w): install "+
				"nvidia-fabricmanager's libnvfm in the driver root, or %s", err, fix)
		}
	}
	lib, err := acquire(path)
	if err != nil {
		return nil, fmt.Errorf("NVSwitch Fabric Manager partitioning is on, but its library cannot be used: %w", err)
	}
	connect, where := connectOptions(o.DriverRoot, lookup)
	m := &Manager{lib: lib, connect: connect, where: where, lockFile: o.LockFile}
	list, err := m.read()
	if err == nil {
		m.partitions, err = validate(list)
	}
	if err != nil {
		_ = release()
		return nil, fmt.Errorf("NVSwitch Fabric Manager partitioning is on, but the partitions cannot be read from nvidia-fabricmanager at %s: %w; %s",
			where, err, fix)
	}
	klog.FromContext(ctx).Info("Connected to NVSwitch Fabric Manager", "library", path, "at", where, "partitions", len(m.partitions))
	return m, nil
}

// Close releases the library; the daemon keeps the partitions as they are.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return release()
}

// Partitions are the partitions FM offered at Open, by ID.
func (m *Manager) Partitions() []Partition {
	out := make([]Partition, len(m.partitions))
	for i, p := range m.partitions {
		out[i] = Partition{ID: p.ID, Modules: slices.Clone(p.Modules)}
	}
	return out
}

// BySize maps the size of each partition holding the module to its ID:
// the partition<N> attributes of the module's GPU.
func (m *Manager) BySize(module int) map[int]int {
	out := map[int]int{}
	for _, p := range m.partitions {
		if slices.Contains(p.Modules, module) {
			out[len(p.Modules)] = p.ID
		}
	}
	return out
}

// Find is the partition whose GPUs are exactly modules (any order).
func (m *Manager) Find(modules []int) (int, bool) {
	want := slices.Clone(modules)
	slices.Sort(want)
	want = slices.Compact(want)
	for _, p := range m.partitions {
		if slices.Equal(p.Modules, want) {
			return p.ID, true
		}
	}
	return 0, false
}

// Activate activates a partition unless FM reports it active already; it
// reports whether it did. Changes of the fabric are serialized.
func (m *Manager) Activate(ctx context.Context, id int) (bool, error) {
	return m.change(ctx, id, true)
}

// Deactivate deactivates a partition if FM reports it active (FM answers
// UNINITIALIZED for one that is not); it reports whether it did.
func (m *Manager) Deactivate(ctx context.Context, id int) (bool, error) {
	return m.change(ctx, id, false)
}

// Active reports whether FM has the partition active.
func (m *Manager) Active(id int) (bool, error) {
	list, err := m.read()
	if err != nil {
		return false, err
	}
	return activeIn(list, id)
}

func (m *Manager) change(ctx context.Context, id int, activate bool) (bool, error) {
	if !slices.ContainsFunc(m.partitions, func(p Partition) bool { return p.ID == id }) {
		return false, fmt.Errorf("NVSwitch Fabric Manager offered no partition %d when the plugin started", id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, errors.New("NVSwitch Fabric Manager connection closed")
	}
	unlock, err := lockFile(m.lockFile)
	if err != nil {
		return false, err
	}
	defer unlock()
	var changed bool
	err = m.withHandle(func(h nvfm.Handle) error {
		list, ret := h.GetSupportedFabricPartitions()
		if ret != nvfm.SUCCESS {
			return fmt.Errorf("fmGetSupportedFabricPartitions: %w", ret)
		}
		active, err := activeIn(list, id)
		if err != nil || active == activate {
			return err
		}
		call, ret := "fmActivateFabricPartition", nvfm.Return(0)
		if activate {
			ret = h.ActivateFabricPartition(nvfm.FabricPartitionId(id))
		} else {
			call, ret = "fmDeactivateFabricPartition", h.DeactivateFabricPartition(nvfm.FabricPartitionId(id))
		}
		if ret != nvfm.SUCCESS {
			return fmt.Errorf("%s(%d): %w", call, id, ret)
		}
		changed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("NVSwitch Fabric Manager at %s: %w", m.where, err)
	}
	klog.FromContext(ctx).V(2).Info("Fabric Manager partition", "id", id, "activate", activate, "changed", changed)
	return changed, nil
}

// withHandle runs f on a connection of its own.
func (m *Manager) withHandle(f func(nvfm.Handle) error) error {
	h, ret := m.lib.Connect(m.connect...)
	if ret != nvfm.SUCCESS {
		return fmt.Errorf("fmConnect: %w", ret)
	}
	defer func() { _ = h.Disconnect() }()
	return f(h)
}

func (m *Manager) read() (nvfm.FabricPartitionList, error) {
	var list nvfm.FabricPartitionList
	err := m.withHandle(func(h nvfm.Handle) error {
		var ret nvfm.Return
		if list, ret = h.GetSupportedFabricPartitions(); ret != nvfm.SUCCESS {
			if ret == nvfm.NOT_SUPPORTED {
				return fmt.Errorf("fmGetSupportedFabricPartitions: %w (Fabric Manager is not in shared NVSwitch mode)", ret)
			}
			return fmt.Errorf("fmGetSupportedFabricPartitions: %w", ret)
		}
		return nil
	})
	return list, err
}

func infos(list nvfm.FabricPartitionList) []nvfm.FabricPartitionInfo {
	n := min(int(list.NumPartitions), len(list.PartitionInfo))
	return list.PartitionInfo[:n]
}

func activeIn(list nvfm.FabricPartitionList, id int) (bool, error) {
	for _, p := range infos(list) {
		if int(p.PartitionId) == id {
			return p.IsActive != 0, nil
		}
	}
	return false, fmt.Errorf("NVSwitch Fabric Manager no longer lists partition %d", id)
}

// validate turns FM's list into partitions: unique IDs, each with GPUs,
// none named twice.
func validate(list nvfm.FabricPartitionList) ([]Partition, error) {
	var out []Partition
	for _, p := range infos(list) {
		id := int(p.PartitionId)
		if slices.ContainsFunc(out, func(q Partition) bool { return q.ID == id }) {
			return nil, fmt.Errorf("partition %d is listed twice", id)
		}
		n := min(int(p.NumGpus), len(p.GpuInfo))
		if n == 0 {
			return nil, fmt.Errorf("partition %d has no GPUs", id)
		}
		modules := make([]int, 0, n)
		for _, g := range p.GpuInfo[:n] {
			modules = append(modules, int(g.PhysicalId))
		}
		slices.Sort(modules)
		if len(slices.Compact(slices.Clone(modules))) != n {
			return nil, fmt.Errorf("partition %d names a GPU twice: modules %v", id, modules)
		}
		out = append(out, Partition{ID: id, Modules: modules})
	}
	slices.SortFunc(out, func(a, b Partition) int { return a.ID - b.ID })
	return out, nil
}

// lockFile takes the flock of path ("" none) and returns its release.
func lockFile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("NVSwitch Fabric Manager lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("NVSwitch Fabric Manager lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
