package prepare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// A claim whose use of a whole GPU needs a compute mode (see
// sharing.Device.ComputeModeNeeded) has it set at prepare, before its MPS
// daemon starts or its time slice is set. Like the time slice, a change has
// a durable marker next to the device locks (computemode.<device>), written
// before the mode is set: it holds the GPU's UUID and the mode the GPU had
// before, which the last claim to leave the GPU sets again before clearing
// it. A GPU already in the mode needed is left alone and not marked. A
// restore that fails (a GPU that does not answer) keeps the marker and is
// tried again at start-up and with the next claim on the GPU; it never
// fails the unprepare.

const computeModeMarkerPrefix = "computemode."

func (m *Manager) computeModeMarker(device string) string {
	return filepath.Join(m.cfg.LockDir, computeModeMarkerPrefix+device)
}

// computeModeMark is a marker's content. Previous and Set are mode names
// (sharing.ComputeModeName).
type computeModeMark struct {
	UUID     string `json:"uuid"`
	Previous string `json:"previous"`
	Set      string `json:"set"`
}

// computeModeMarked reads a GPU's marker. A marker of an older version
// holds only the UUID: the GPU had DEFAULT before (that version only ever
// set EXCLUSIVE_PROCESS).
func (m *Manager) computeModeMarked(device string) (mark computeModeMark, previous nvml.ComputeMode, marked bool, err error) {
	b, err := os.ReadFile(m.computeModeMarker(device))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return mark, 0, false, nil
	case err != nil:
		return mark, 0, false, fmt.Errorf("read the compute mode marker of %s: %w", device, err)
	}
	if err := json.Unmarshal(b, &mark); err != nil {
		mark = computeModeMark{UUID: strings.TrimSpace(string(b)), Previous: "DEFAULT", Set: "EXCLUSIVE_PROCESS"}
	}
	previous, err = sharing.ParseComputeMode(mark.Previous)
	if err != nil {
		return mark, 0, false, fmt.Errorf("compute mode marker of %s: %w", device, err)
	}
	return mark, previous, true, nil
}

func (m *Manager) markComputeMode(device string, mark computeModeMark) error {
	b, err := json.Marshal(mark)
	if err != nil {
		return fmt.Errorf("record the compute mode of %s: %w", device, err)
	}
	if err := atomicfile.WriteFile(m.computeModeMarker(device), b, 0o600); err != nil {
		return fmt.Errorf("record the compute mode of %s: %w", device, err)
	}
	return nil
}

// setComputeModes puts each whole GPU of the claim into the compute mode
// its use needs; devices that need none get a pending restore. The caller
// holds the devices' locks and rolls back (releaseSharing) on error.
func (m *Manager) setComputeModes(ctx context.Context, uid string, devs []sharing.Device) error {
	for _, d := range devs {
		want, needed := d.ComputeModeNeeded()
		if !needed {
			if !d.MIG {
				m.restoreComputeMode(ctx, d.Name, uid)
			}
			continue
		}
		if m.cfg.ComputeMode == nil {
			continue
		}
		if err := m.setComputeMode(ctx, d, want); err != nil {
			return fmt.Errorf("%s (%s): put the GPU into compute mode %s for %s: %w; %s", d.Name, d.UUID,
				sharing.ComputeModeName(want), usage(d), err, sharing.ComputeModeHint(err))
		}
	}
	return nil
}

// usage names what a device's compute mode is needed for, in messages.
func usage(d sharing.Device) string {
	if d.Share {
		return "its consumable share (MPS)"
	}
	return "strategy " + string(d.Strategy())
}

func (m *Manager) setComputeMode(ctx context.Context, d sharing.Device, want nvml.ComputeMode) error {
	mark, previous, marked, err := m.computeModeMarked(d.Name)
	if err != nil {
		return err
	}
	current, err := m.cfg.ComputeMode.ComputeMode(ctx, d.UUID)
	if err != nil {
		return err
	}
	if !marked || mark.UUID != d.UUID {
		// Unmarked (or marked for a GPU the node no longer has): what the GPU
		// has now is what the last claim restores.
		previous = current
	}
	if previous != want {
		mark = computeModeMark{UUID: d.UUID, Previous: sharing.ComputeModeName(previous), Set: sharing.ComputeModeName(want)}
		if err := m.markComputeMode(d.Name, mark); err != nil {
			return err
		}
	}
	if current != want {
		if err := m.cfg.ComputeMode.SetComputeMode(ctx, d.UUID, want); err != nil {
			if !marked {
				// The mode is unchanged: nothing to restore.
				_ = m.clearComputeMode(d.Name)
			}
			return err
		}
	}
	if marked && previous == want {
		// A pending restore reached the mode from before: nothing left to restore.
		return m.clearComputeMode(d.Name)
	}
	return nil
}

func (m *Manager) clearComputeMode(device string) error {
	if err := os.Remove(m.computeModeMarker(device)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clear the compute mode marker of %s: %w", device, err)
	}
	return nil
}

// restoreComputeMode sets the mode a marked GPU had before once no claim
// other than uid holds it, best effort (see the comment above).
func (m *Manager) restoreComputeMode(ctx context.Context, device, uid string) {
	if m.cfg.ComputeMode == nil {
		return
	}
	logger := klog.FromContext(ctx).WithValues("device", device)
	mark, previous, marked, err := m.computeModeMarked(device)
	if err != nil {
		logger.Error(err, "Compute mode not restored; the restore is tried again later")
		return
	}
	if !marked {
		return
	}
	if _, held, err := m.otherHolder(device, uid); err != nil || held {
		return // another claim holds it, or the index cannot tell
	}
	logger = logger.WithValues("uuid", mark.UUID, "mode", mark.Previous)
	if gpu := m.gpus[device]; gpu == nil || gpu.UUID != mark.UUID {
		logger.Info("Compute mode not restored: the node no longer has this GPU; retried when it is back")
		return
	}
	if err := m.cfg.ComputeMode.SetComputeMode(ctx, mark.UUID, previous); err != nil {
		logger.Error(err, "Compute mode not restored; retried at start-up and with the next claim on this GPU",
			"hint", sharing.ComputeModeHint(err))
		return
	}
	if err := m.clearComputeMode(device); err != nil {
		logger.Error(err, "Compute mode restored, but its marker stays; the restore is repeated later")
		return
	}
	logger.V(3).Info("Restored the compute mode")
}

// retryComputeModeRestores tries the pending restores again, each under
// its GPU's lock (at start-up).
func (m *Manager) retryComputeModeRestores(ctx context.Context) {
	entries, err := os.ReadDir(m.cfg.LockDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		device, ok := strings.CutPrefix(e.Name(), computeModeMarkerPrefix)
		if !ok || validateLockName(device) != nil || !e.Type().IsRegular() {
			continue
		}
		unlock, err := m.locks.lock([]string{device})
		if err != nil {
			continue
		}
		m.restoreComputeMode(ctx, device, "")
		unlock()
	}
}
