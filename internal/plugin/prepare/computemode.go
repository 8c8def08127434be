package prepare

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// A GPU that an MPS claim holds whole runs in EXCLUSIVE_PROCESS compute
// mode. Like the time slice, the setting has a durable marker next to the
// device locks (computemode.<device>, holding the GPU's UUID), written before
// the mode is set: the last claim to leave the GPU sets DEFAULT again and
// clears it; a restore that fails (a GPU that does not answer) keeps the
// marker and is tried again at start-up and with the next claim on the GPU.

const computeModeMarkerPrefix = "computemode."

func (m *Manager) computeModeMarker(device string) string {
	return filepath.Join(m.cfg.LockDir, computeModeMarkerPrefix+device)
}

// setExclusiveModes puts the devices of an MPS claim that hold a whole GPU
// into EXCLUSIVE_PROCESS; other devices get a pending restore. The caller
// holds the devices' locks and rolls back (releaseSharing) on error.
func (m *Manager) setExclusiveModes(ctx context.Context, uid string, devs []sharing.Device) error {
	for _, d := range devs {
		if !d.ExclusiveMPS() {
			if !d.MIG {
				m.restoreComputeMode(ctx, d.Name, uid)
			}
			continue
		}
		if m.cfg.ComputeMode == nil {
			continue
		}
		if err := atomicfile.WriteFile(m.computeModeMarker(d.Name), []byte(d.UUID), 0o600); err != nil {
			return fmt.Errorf("record the compute mode of %s: %w", d.Name, err)
		}
		if err := m.cfg.ComputeMode.SetComputeMode(ctx, d.UUID, true); err != nil {
			return fmt.Errorf("%s: put the GPU into EXCLUSIVE_PROCESS compute mode for MPS: %w", d.Name, err)
		}
	}
	return nil
}

// restoreComputeMode sets DEFAULT again on a marked GPU that no claim other
// than uid holds, best effort (see the comment above).
func (m *Manager) restoreComputeMode(ctx context.Context, device, uid string) {
	b, err := os.ReadFile(m.computeModeMarker(device))
	if errors.Is(err, fs.ErrNotExist) || m.cfg.ComputeMode == nil {
		return
	}
	logger := klog.FromContext(ctx).WithValues("device", device)
	if err != nil {
		logger.Error(err, "Compute mode marker unreadable; the restore is tried again later")
		return
	}
	uuid := strings.TrimSpace(string(b))
	holders, err := m.cfg.Checkpoints.Holders(device)
	if err != nil || slices.ContainsFunc(holders, func(h checkpoint.Holder) bool { return h.ClaimUID != uid }) {
		return // another claim holds it, or the index cannot tell
	}
	if gpu := m.gpus[device]; gpu == nil || gpu.UUID != uuid {
		logger.Info("DEFAULT compute mode not restored: the node no longer has this GPU; retried when it is back")
		return
	}
	if err := m.cfg.ComputeMode.SetComputeMode(ctx, uuid, false); err != nil {
		logger.Error(err, "DEFAULT compute mode not restored; retried at start-up and with the next claim on this GPU")
		return
	}
	if err := os.Remove(m.computeModeMarker(device)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		logger.Error(err, "DEFAULT compute mode restored, but its marker stays; the restore is repeated later")
	}
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
