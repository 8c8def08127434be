package health

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// Persistence. A monitor with Config.StateFile keeps its conditions in that
// file, so that a restarted plugin starts with the taints it had: with a
// driver that reports no recovery action nothing else would bring back a
// fatal XID, and a degraded condition keeps its hold deadline. The file is
// valid for one boot (Config.BootID); after a reboot it is discarded, as the
// reboot repaired what it describes.
//
// New reads the file. Only a monitor that StartSaving was called on writes
// it (the plugin instance that publishes the node's slices; during a
// rolling update the other instance only reads it). Writes replace the file
// by rename, so a reader sees the old or the new content, never a mix; they
// are not fsynced, because a power loss means a reboot, after which the
// file is stale anyway.

// stateVersion is the format of the state file this code writes and reads.
const stateVersion = 1

type savedState struct {
	Version int                 `json:"version"`
	BootID  string              `json:"bootID"`
	GPUs    map[string]savedGPU `json:"gpus,omitempty"` // by UUID
}

type savedGPU struct {
	Conditions      []savedCondition `json:"conditions,omitempty"`
	RecoveryPending bool             `json:"recoveryPending,omitempty"`
	// ECCBaseline is the volatile uncorrectable ECC count last read.
	ECCBaseline uint64 `json:"eccBaseline,omitempty"`
}

type savedCondition struct {
	Key            string                        `json:"key"`
	Value          string                        `json:"value"`
	Effect         resourceapi.DeviceTaintEffect `json:"effect"`
	Message        string                        `json:"message,omitempty"`
	Since          time.Time                     `json:"since"`
	UntilRecovered bool                          `json:"untilRecovered,omitempty"`
}

// readState reads the state file: nil without a file; an error for a file
// that cannot be used (then the monitor starts without it).
func (m *Monitor) readState() (*savedState, []byte, error) {
	raw, err := os.ReadFile(m.cfg.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read GPU health state: %w", err)
	}
	var st savedState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, raw, fmt.Errorf("GPU health state %s is damaged (%w); it is replaced at the next change", m.cfg.StateFile, err)
	}
	if st.Version != stateVersion {
		return nil, raw, fmt.Errorf("GPU health state %s has format version %d, this plugin reads %d; it is replaced at the next change",
			m.cfg.StateFile, st.Version, stateVersion)
	}
	return &st, raw, nil
}

// restoreNote says what New did with the state file, for Run to log.
type restoreNote struct {
	conditions int
	discarded  string // why the file was not used
	err        error
}

// restore applies the saved state of this boot to the GPUs it names (New).
func (m *Monitor) restore() restoreNote {
	st, raw, err := m.readState()
	m.disk = raw
	switch {
	case err != nil:
		return restoreNote{err: err}
	case st == nil:
		return restoreNote{}
	case st.BootID != m.cfg.BootID:
		return restoreNote{discarded: fmt.Sprintf("it was written during boot %s, this is boot %s", st.BootID, m.cfg.BootID)}
	}
	n := 0
	for id, saved := range st.GPUs {
		if g, ok := m.gpus[id]; ok {
			g.eccBaseline = saved.ECCBaseline
			n += g.merge(saved)
		}
	}
	return restoreNote{conditions: n}
}

// merge adds the saved conditions the GPU lacks (or has only weaker) and a
// pending recovery; it returns how many conditions it added or replaced.
func (g *gpuState) merge(saved savedGPU) int {
	n := 0
	for _, c := range saved.Conditions {
		cond := Condition{Key: c.Key, Value: c.Value, Effect: c.Effect, Message: c.Message, Since: c.Since,
			untilRecovered: c.UntilRecovered}
		if old, ok := g.conds[c.Key]; ok && severity(old.Effect) >= severity(c.Effect) {
			continue
		}
		g.conds[c.Key] = cond
		n++
	}
	g.recoveryPending = g.recoveryPending || saved.RecoveryPending
	return n
}

// log reports what New restored.
func (n restoreNote) log(logger klog.Logger, file string) {
	switch {
	case n.err != nil:
		logger.Error(n.err, "Starting without the saved GPU health conditions")
	case n.discarded != "":
		logger.Info("Saved GPU health conditions discarded", "file", file, "reason", n.discarded)
	case n.conditions > 0:
		logger.Info("Restored saved GPU health conditions", "file", file, "conditions", n.conditions)
	}
}

// StartSaving makes the monitor write its state to Config.StateFile from now
// on, after every change. Conditions another monitor saved there since this
// one read the file (New) are adopted first: the plugin instance that takes
// over publishing during a rolling update keeps what the one that stopped
// had seen. Without a StateFile it does nothing.
func (m *Monitor) StartSaving(ctx context.Context) {
	if m.cfg.StateFile == "" {
		return
	}
	logger := klog.FromContext(ctx)
	m.saveMu.Lock()
	st, raw, err := m.readState()
	if err != nil {
		logger.Error(err, "Cannot adopt the GPU health conditions another plugin instance saved")
	}
	m.mu.Lock()
	adopted := 0
	if st != nil && st.BootID == m.cfg.BootID && !bytes.Equal(raw, m.disk) {
		for id, saved := range st.GPUs {
			if g, ok := m.gpus[id]; ok {
				adopted += g.merge(saved)
			}
		}
	}
	m.saving = true
	m.mu.Unlock()
	removeTempFiles(ctx, m.cfg.StateFile) // left by a writer that crashed
	m.saveLocked(ctx)
	m.saveMu.Unlock()
	if adopted > 0 {
		logger.Info("Adopted GPU health conditions saved by another plugin instance", "conditions", adopted)
		m.changed()
	}
}

// StopSaving stops writing the state file; a write in progress completes
// first.
func (m *Monitor) StopSaving() {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	m.saving = false
	m.mu.Unlock()
}

// save writes the state if this monitor saves and it changed.
func (m *Monitor) save(ctx context.Context) {
	if m.cfg.StateFile == "" {
		return
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.saveLocked(ctx)
}

func (m *Monitor) saveLocked(ctx context.Context) {
	m.mu.Lock()
	if !m.saving {
		m.mu.Unlock()
		return
	}
	st := savedState{Version: stateVersion, BootID: m.cfg.BootID, GPUs: map[string]savedGPU{}}
	for id, g := range m.gpus {
		s := savedGPU{RecoveryPending: g.recoveryPending, ECCBaseline: g.eccBaseline}
		for _, c := range g.snapshot() {
			s.Conditions = append(s.Conditions, savedCondition{Key: c.Key, Value: c.Value, Effect: c.Effect, Message: c.Message,
				Since: c.Since.UTC().Round(0), UntilRecovered: c.untilRecovered})
		}
		if s.Conditions != nil || s.RecoveryPending || s.ECCBaseline != 0 {
			st.GPUs[id] = s
		}
	}
	m.mu.Unlock()
	b, err := json.Marshal(st)
	if err == nil && bytes.Equal(b, m.disk) {
		return
	}
	if err == nil {
		err = atomicfile.WriteFile(m.cfg.StateFile, b, 0o600)
	}
	if err != nil {
		if msg := err.Error(); msg != m.saveErr {
			klog.FromContext(ctx).Error(err, "Saving the GPU health conditions failed; a restarted plugin would lose them", "file", m.cfg.StateFile)
			m.saveErr = msg
		}
		return
	}
	m.disk, m.saveErr = b, ""
}

// removeTempFiles removes the temporary files of writes to path that were
// interrupted. Only the monitor that saves may call it: another one's
// write might be in progress.
func removeTempFiles(ctx context.Context, path string) {
	if _, err := atomicfile.RemoveTemps(path); err != nil {
		klog.FromContext(ctx).Error(err, "Removing a leftover temporary file failed")
	}
}
