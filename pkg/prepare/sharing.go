package prepare

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/pkg/cdi"
	"github.com/gpudra/gpudra/pkg/checkpoint"
	"github.com/gpudra/gpudra/pkg/sharing"
	"github.com/gpudra/gpudra/pkg/slice"
)

// Sharing hooks of the prepare state machine (pkg/sharing does the work):
// time slices are set per GPU and restored to the default when the last
// holder goes; MPS claims (and consumable shares, whose memory MPS limits)
// get a control daemon of their own, recorded in the claim's checkpoint.

// sharingDevices describes the plan's devices to pkg/sharing.
func sharingDevices(plan []planned) []sharing.Device {
	byRequest := visibleByRequest(plan)
	out := make([]sharing.Device, 0, len(plan))
	for _, p := range plan {
		out = append(out, sharing.Device{
			Name: p.record.Name, UUID: p.record.UUID, Config: p.cfg.Config,
			RequestUUIDs: visibleUUIDs(p, byRequest),
			Share:        p.record.ShareID != "", ShareMemory: p.record.ConsumedMemory,
			MIG: p.record.MIG != nil,
		})
	}
	return out
}

// applySharing configures the GPUs of a claim being prepared and records
// the MPS daemon, if any, in rec. The caller holds the devices' locks and
// rolls back (releaseSharing) on error.
func (m *Manager) applySharing(ctx context.Context, rec *checkpoint.ClaimRecord, plan []planned) error {
	devs := sharingDevices(plan)
	daemon, err := sharing.PlanMPS(devs)
	if err != nil {
		return err
	}
	for _, d := range devs {
		interval, ok := d.SetsTimeSlice()
		if !ok {
			continue
		}
		if err := m.checkTimeSliceAgreement(d, rec.UID, interval); err != nil {
			return err
		}
		if err := m.setTimeSlice(ctx, d.UUID, interval); err != nil {
			return err
		}
		if err := m.markTimeSliced(d.Name, interval != v1alpha1.DefaultTimeSlice); err != nil {
			return err
		}
	}
	if daemon == nil {
		return nil
	}
	if m.cfg.MPS == nil {
		return fmt.Errorf("%w: MPS is not available on node %s (the plugin runs without an MPS control binary)", sharing.ErrNoTool, m.cfg.PoolName)
	}
	if err := m.cfg.MPS.Start(ctx, rec.UID, daemon); err != nil {
		return err
	}
	rec.MPS = daemon
	return nil
}

func (m *Manager) setTimeSlice(ctx context.Context, uuid string, interval v1alpha1.TimeSliceInterval) error {
	if m.cfg.TimeSlicer == nil {
		return fmt.Errorf("%w: time slicing is not available on node %s (the plugin runs without nvidia-smi)", sharing.ErrNoTool, m.cfg.PoolName)
	}
	return m.cfg.TimeSlicer.SetTimeSlice(ctx, uuid, interval)
}

// checkTimeSliceAgreement refuses a time slice that differs from the one
// another holder of the GPU (a share or admin claim) has set: the setting
// is per GPU.
func (m *Manager) checkTimeSliceAgreement(d sharing.Device, uid string, want v1alpha1.TimeSliceInterval) error {
	holders, err := m.cfg.Checkpoints.Holders(d.Name)
	if err != nil {
		return tag(errCheckpoint, err)
	}
	for _, h := range holders {
		if h.ClaimUID == uid {
			continue
		}
		other, err := m.cfg.Checkpoints.Get(h.ClaimUID)
		if err != nil || other == nil {
			continue
		}
		for _, od := range other.Devices {
			if od.Name != d.Name {
				continue
			}
			p, err := plannedFromRecord(od)
			if err != nil {
				continue
			}
			got, ok := (&sharing.Device{Config: p.cfg.Config}).TimeSlice()
			if ok && got != want {
				return fmt.Errorf("%w: %s (%s) is time-sliced with interval %s for claim %s; a GPU has one time slice, "+
					"so this claim cannot set %s — use the same interval", sharing.ErrUnenforceable, d.Name, d.UUID, got, h.Claim, want)
			}
		}
	}
	return nil
}

// releaseSharing undoes applySharing: it stops the claim's MPS daemon and
// restores the default time slice of its GPUs that no other claim holds and
// that some claim time-sliced. The caller holds the devices' locks; the claim's holders may
// or may not be gone yet.
func (m *Manager) releaseSharing(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	if m.cfg.MPS != nil {
		if err := m.cfg.MPS.StopClaim(ctx, rec.UID); err != nil {
			return err
		}
	}
	for _, d := range rec.Devices {
		if _, err := os.Stat(m.timeSliceMarker(d.Name)); err != nil {
			continue // the GPU has the default time slice
		}
		holders, err := m.cfg.Checkpoints.Holders(d.Name)
		if err != nil {
			return tag(errCheckpoint, err)
		}
		if slices.ContainsFunc(holders, func(h checkpoint.Holder) bool { return h.ClaimUID != rec.UID }) {
			klog.FromContext(ctx).V(3).Info("Time slice kept: another claim holds the GPU", "device", d.Name, "uuid", d.UUID)
			continue
		}
		if err := m.setTimeSlice(ctx, d.UUID, v1alpha1.DefaultTimeSlice); err != nil {
			return fmt.Errorf("restore the default time slice: %w", err)
		}
		if err := m.markTimeSliced(d.Name, false); err != nil {
			return err
		}
	}
	return nil
}

// timeSliceMarker exists while a GPU has a time slice other than the
// default, whichever claim set it: the last claim to leave the GPU restores
// the default. It lives next to the device locks (same node-wide directory).
func (m *Manager) timeSliceMarker(device string) string {
	return filepath.Join(m.cfg.LockDir, "timeslice."+device)
}

func (m *Manager) markTimeSliced(device string, on bool) error {
	path := m.timeSliceMarker(device)
	if on {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return fmt.Errorf("record the time slice of %s: %w", device, err)
		}
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clear the time-slice marker of %s: %w", device, err)
	}
	return nil
}

// restoreSharing brings a recovered claim's sharing back: time slices set
// again (a GPU reset clears them), the MPS daemon adopted or restarted. It
// reports whether rec changed (a new daemon PID) and must be written.
func (m *Manager) restoreSharing(ctx context.Context, rec *checkpoint.ClaimRecord, plan []planned) (bool, error) {
	for _, d := range sharingDevices(plan) {
		if interval, ok := d.SetsTimeSlice(); ok {
			if err := m.setTimeSlice(ctx, d.UUID, interval); err != nil {
				return false, err
			}
		}
	}
	if rec.MPS == nil {
		return false, nil
	}
	if m.cfg.MPS == nil {
		return false, fmt.Errorf("claim %s/%s has an MPS daemon, but the plugin runs without an MPS control binary", rec.Namespace, rec.Name)
	}
	return m.cfg.MPS.Ensure(ctx, rec.UID, rec.MPS)
}

// removeMPSOrphans stops daemons whose claim has no record.
func (m *Manager) removeMPSOrphans(ctx context.Context) error {
	if m.cfg.MPS == nil {
		return nil
	}
	orphans, err := m.cfg.MPS.Orphans(func(uid string) bool {
		rec, err := m.cfg.Checkpoints.Get(uid)
		return err != nil || rec != nil
	})
	if err != nil {
		return err
	}
	for _, uid := range orphans {
		klog.FromContext(ctx).Info("Stopping MPS control daemon of an unknown claim", "claimUID", uid)
		if err := m.cfg.MPS.StopClaim(ctx, uid); err != nil {
			return err
		}
	}
	return nil
}

// withSharingEdits adds what reaching the claim's MPS daemon needs.
func withSharingEdits(d cdi.ClaimDevice, uuid string, mps *checkpoint.MPSDaemon) cdi.ClaimDevice {
	env, mounts := sharing.ContainerEdits(mps, uuid, d.VisibleUUIDs)
	d.Env = append(d.Env, env...)
	d.Mounts = append(d.Mounts, mounts...)
	return d
}

// consumedMemory is the memory a share consumed, in bytes.
func consumedMemory(c *planned) int64 {
	q, ok := c.cfg.Result.ConsumedCapacity[slice.CapacityMemory]
	if !ok {
		return 0
	}
	return q.Value()
}
