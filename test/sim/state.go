package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// A real GPU keeps its MIG mode and MIG instances when the process that
// created them exits; only a reboot (or a GPU reset) clears them. A
// simulated GPU lives in the plugin's memory, so PersistTo keeps its MIG
// state in a file: a restarted plugin finds the MIG devices it left, tools
// (gpu-kubelet-plugin inspect, e2e tests) can look at them, and processes
// running side by side see each other's changes (statesync.go).

// State is the persisted MIG state of a simulated node.
type State struct {
	// Node and Profile name the simulated node the state belongs to.
	Node    string     `json:"node"`
	Profile string     `json:"profile"`
	GPUs    []GPUState `json:"gpus"`
}

// GPUState is the MIG state of one GPU.
type GPUState struct {
	UUID       string `json:"uuid"`
	MIGEnabled bool   `json:"migEnabled"`
	// MIGPendingEnabled is the MIG mode after the next GPU reset, when it
	// differs from MIGEnabled (Ampere, see migcaps.go).
	MIGPendingEnabled *bool  `json:"migPendingEnabled,omitempty"`
	MIGCounter        uint64 `json:"migCounter,omitempty"`
	// ComputeMode is the GPU's nvml.ComputeMode (0: DEFAULT), kept like the
	// MIG state so that a restarted plugin, and tests, see what was set.
	ComputeMode  int            `json:"computeMode,omitempty"`
	GPUInstances []GPUInstState `json:"gpuInstances,omitempty"`
}

// GPUInstState is one GPU instance.
type GPUInstState struct {
	ID               uint32          `json:"id"`
	Profile          string          `json:"profile"`
	Start            int             `json:"start"`
	ComputeInstances []CompInstState `json:"computeInstances,omitempty"`
}

// CompInstState is one compute instance, i.e. one MIG device.
type CompInstState struct {
	ID          uint32 `json:"id"`
	NVMLProfile int    `json:"nvmlProfile"`
	Start       int    `json:"start"`
	UUID        string `json:"uuid"`
}

// ReadState reads a state file written by a Server.
func ReadState(path string) (*State, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("simulated NVML state %s: %w", path, err)
	}
	return &st, nil
}

// PersistTo keeps the server's MIG state in path, shared with every other
// server (process) persisting to it (statesync.go). If the file exists, the
// server takes its state from it (replacing the profile's initial MIG
// devices), as a restarted process finds a real GPU's MIG configuration;
// otherwise the current state is written. Call it before the server is
// shared between goroutines.
func (s *Server) PersistTo(path string) error {
	if path == "" {
		return errors.New("simulated NVML state: no file named")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("simulated NVML state: %w", err)
	}
	f, err := openLockFile(path)
	if err != nil {
		return err
	}
	s.mu.mu.Lock()
	defer s.mu.mu.Unlock()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return fmt.Errorf("simulated NVML state lock: %w", err)
	}
	defer func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }()
	id, err := statID(path)
	if err == nil {
		err = s.loadLocked(path)
	}
	switch {
	case err == nil:
		// Nothing changed: nothing to write.
		s.stateFile, s.lockFile, s.fileID = path, f, id
		return nil
	case errors.Is(err, fs.ErrNotExist):
		s.stateFile, s.lockFile = path, f
		return s.saveLocked()
	default:
		_ = f.Close()
		return err
	}
}

func (s *Server) loadLocked(path string) error {
	st, err := ReadState(path)
	if err != nil {
		return err
	}
	if err := s.mergeLocked(st); err != nil {
		return fmt.Errorf("simulated NVML state %s: %w; remove the file to start from the profile", path, err)
	}
	return nil
}

// persistLocked writes the state file after a change, if there is one. A
// failure is logged: the change itself happened, as on a real GPU.
func (s *Server) persistLocked() {
	if s.stateFile == "" {
		return
	}
	if err := s.saveLocked(); err != nil {
		klog.Background().Error(err, "Simulated NVML: cannot write the MIG state file", "path", s.stateFile)
	}
}

func (s *Server) saveLocked() error {
	st := State{Node: s.nodeName, Profile: s.profile.Name}
	for _, d := range s.devices {
		g := GPUState{UUID: d.uuid, MIGEnabled: d.migMode == nvml.DEVICE_MIG_ENABLE, MIGCounter: d.migCounter, ComputeMode: int(d.computeMode)}
		if d.migPending != d.migMode {
			pending := d.migPending == nvml.DEVICE_MIG_ENABLE
			g.MIGPendingEnabled = &pending
		}
		for _, gi := range d.sortedGIsLocked() {
			gs := GPUInstState{ID: gi.info.Id, Profile: gi.prof.Name, Start: int(gi.info.Placement.Start)}
			for _, ci := range gi.sortedCIsLocked() {
				gs.ComputeInstances = append(gs.ComputeInstances, CompInstState{
					ID: ci.info.Id, NVMLProfile: ci.prof.nvmlProfile, Start: int(ci.info.Placement.Start), UUID: ci.mig.uuid})
			}
			g.GPUInstances = append(g.GPUInstances, gs)
		}
		st.GPUs = append(st.GPUs, g)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.stateFile, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write simulated NVML state: %w", err)
	}
	// This version is this server's own: no need to read it again.
	if id, err := statID(s.stateFile); err == nil {
		s.fileID = id
	}
	return nil
}
