package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// Processes are the simulator's workload: what runs on its GPUs. Real NVML
// knows the compute processes of each GPU; the simulator learns them from a
// directory with one JSON file per process (<id>.json, a Process), written
// by whatever plays the container runtime. A record lives as long as its
// file, or, when a lock file <id>.lock sits next to it, as long as some
// process holds a flock on that file: the fake driver root's nvidia-cdi-hook
// (test/fakedriver) leaves a helper holding it inside each container with
// GPUs, so the record dies with the container (a dead record is removed when
// it is read). A record without a lock file lives until its file is removed
// (the unit tests write such records). A GPU or MIG device is busy
// while a live process names it, and idle otherwise; the load itself follows
// a deterministic curve (telemetry.go).

// Process is one simulated compute process.
type Process struct {
	// Name says what runs, e.g. "<namespace>/<pod>/<container>".
	Name string `json:"name"`
	// Devices are the UUIDs (GPU-... or MIG-...) of the devices it uses.
	Devices []string `json:"devices"`
}

// processRefresh is how long a read of the process directory is reused.
const processRefresh = 500 * time.Millisecond

// WriteProcess records process id (a file name: letters, digits, '-',
// '_', '.') in dir, replacing an earlier record of the same id atomically.
func WriteProcess(dir, id string, p Process) error {
	if err := validProcessID(id); err != nil {
		return err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode simulated process %s: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create simulated process directory: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, id+".json"), data, 0o644); err != nil {
		return fmt.Errorf("write simulated process %s: %w", id, err)
	}
	return nil
}

// RemoveProcess removes the record of process id; a missing one is fine.
func RemoveProcess(dir, id string) error {
	if err := validProcessID(id); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(dir, id+".json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove simulated process %s: %w", id, err)
	}
	return nil
}

// ReadProcesses returns the live processes recorded in dir by id. A
// missing directory holds none; unreadable or malformed records are skipped
// (a writer may be replacing one); dead ones are removed (best effort).
func ReadProcesses(dir string) (map[string]Process, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Process{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list simulated processes: %w", err)
	}
	out := map[string]Process{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() || validProcessID(id) != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var p Process
		if json.Unmarshal(data, &p) != nil {
			continue
		}
		if !alive(dir, id) {
			_ = os.Remove(filepath.Join(dir, id+".json"))
			_ = os.Remove(filepath.Join(dir, id+".lock"))
			continue
		}
		out[id] = p
	}
	return out, nil
}

// alive reports whether process id still runs: while a process holds the
// flock of its lock file, or, without a lock file, while its record exists.
func alive(dir, id string) bool {
	f, err := os.Open(filepath.Join(dir, id+".lock"))
	if err != nil {
		return true // no lock file: the record's writer removes it
	}
	defer func() { _ = f.Close() }()
	fd := int(f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true // held (EWOULDBLOCK): the process runs
	}
	_ = syscall.Flock(fd, syscall.LOCK_UN)
	return false
}

func validProcessID(id string) error {
	if id == "" || len(id) > 128 || strings.HasPrefix(id, ".") {
		return fmt.Errorf("invalid simulated process ID %q: 1 to 128 characters, not starting with '.'", id)
	}
	for _, c := range id {
		allowed := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !allowed {
			return fmt.Errorf("invalid simulated process ID %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

// processTable caches the process directory of a server: which process
// IDs run on each device UUID.
type processTable struct {
	dir string
	now func() time.Time

	mu       sync.Mutex
	read     time.Time
	byDevice map[string][]string // UUID -> sorted process IDs
}

// SetProcessDir makes the server's GPUs busy while processes recorded in
// dir use them (see Process). Without it every GPU stays idle. Call before
// the server is shared.
func (s *Server) SetProcessDir(dir string) { s.procs.dir = dir }

// processesOn returns the IDs of the processes using the device with this
// UUID, sorted.
func (t *processTable) processesOn(uuid string) []string {
	if t.dir == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.byDevice == nil || now.Sub(t.read) >= processRefresh || now.Before(t.read) {
		procs, err := ReadProcesses(t.dir)
		if err != nil {
			procs = nil // an unreadable directory reads as idle
		}
		t.byDevice = map[string][]string{}
		for id, p := range procs {
			for _, d := range slices.Compact(slices.Sorted(slices.Values(p.Devices))) {
				t.byDevice[d] = append(t.byDevice[d], id)
			}
		}
		for _, ids := range t.byDevice {
			slices.Sort(ids)
		}
		t.read = now
	}
	return t.byDevice[uuid]
}
