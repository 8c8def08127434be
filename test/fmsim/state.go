package fmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// StatePath is the simulated Fabric Manager's state in a fake driver root.
const StatePath = "var/lib/gpudra-sim/fabricmanager.json"

// SocketPath is where the simulated nvidia-fabricmanager listens, in a fake
// driver root: the driver root's run/nvidia-fabricmanager/socket, where
// NVIDIA's DRA driver connects by default.
const SocketPath = "run/nvidia-fabricmanager/socket"

// State is what the simulated Fabric Manager keeps between calls and
// processes. A missing file is the zero State.
type State struct {
	// Active are the IDs of the activated partitions, sorted.
	Active []int `json:"active,omitempty"`
	// Initializing makes the partition calls answer NOT_CONFIGURED, as a
	// Fabric Manager that has not finished configuring the fabric does.
	Initializing bool `json:"initializing,omitempty"`
}

// ReadState reads the state file; a missing file is the zero State.
func ReadState(path string) (State, error) {
	var s State
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read simulated Fabric Manager state: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%s: %w (fields: active, initializing)", path, err)
	}
	return s, nil
}

// UpdateState runs f on the state under an exclusive lock of path+".lock"
// (flock: every process of the root, the plugin's and the tests', takes it)
// and writes the state back atomically when f returns true.
func UpdateState(path string, f func(*State) bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("simulated Fabric Manager state: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("simulated Fabric Manager state lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("simulated Fabric Manager state lock %s: %w", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	s, err := ReadState(path)
	if err != nil {
		return err
	}
	if !f(&s) {
		return nil
	}
	slices.Sort(s.Active)
	return atomicfile.Write(path, 0o644, atomicfile.SyncFile, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(s)
	})
}
