package prepare

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/claimconfig"
	"github.com/gpudra/gpudra/internal/plugin/failpoint"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// Sharing hooks of the prepare state machine (internal/plugin/sharing does the work):
// time slices are set per GPU and restored to the default when the last
// holder goes; MPS claims (and consumable shares that consumed memory, which
// MPS limits) get control daemons of their own, one per configuration group,
// recorded in the claim's checkpoint.

// applySharing configures the GPUs of a claim being prepared and records
// its MPS daemons (one per configuration group), if any, in its record. The caller holds the devices' locks
// and rolls back (releaseSharing) on error.
func (m *Manager) applySharing(ctx context.Context, c *claimState) error {
	rec := c.rec
	devs := c.sharingDevices()
	for i := range devs {
		devs[i].Memory = m.deviceMemory(devs[i].Name)
	}
	daemons, err := sharing.PlanMPS(devs)
	if err != nil {
		return err
	}
	// The compute mode first, as NVIDIA's driver does: DEFAULT before a
	// time slice, EXCLUSIVE_PROCESS before an MPS daemon starts.
	if err := m.setComputeModes(ctx, rec.UID, devs); err != nil {
		return err
	}
	for _, d := range devs {
		interval, ok := d.SetsTimeSlice()
		if !ok {
			// A time slice left behind by an earlier claim whose restore
			// failed is restored now (best effort).
			if !d.MIG {
				if err := m.restoreTimeSlice(ctx, d.Name, rec.UID); err != nil {
					return err
				}
			}
			continue
		}
		if err := m.checkTimeSliceAgreement(d, rec.UID, interval); err != nil {
			return err
		}
		if err := m.setTimeSlice(ctx, d.UUID, interval); err != nil {
			return err
		}
		if err := m.markTimeSliced(d.Name, d.UUID, interval != v1alpha1.DefaultTimeSlice); err != nil {
			return err
		}
		failpoint.Inject(failpoint.PrepareTimeSliceSet)
	}
	if len(daemons) == 0 {
		return nil
	}
	if m.cfg.MPS == nil {
		return fmt.Errorf("%w: MPS is not available on node %s (the plugin runs without an MPS control binary)", sharing.ErrNoTool, m.cfg.PoolName)
	}
	// One daemon per configuration group; the caller's rollback
	// (releaseSharing) stops those started before one that failed.
	for _, d := range daemons {
		if err := m.cfg.MPS.Start(ctx, rec.UID, d); err != nil {
			if len(daemons) > 1 {
				return fmt.Errorf("MPS control daemon %d of %d (devices %s): %w", d.Group+1, len(daemons), strings.Join(d.Devices, ", "), err)
			}
			return err
		}
	}
	setMPS(rec, daemons)
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
			cfg, err := v1alpha1.Decode(od.Config)
			if err != nil {
				continue
			}
			got, ok := (&sharing.Device{Config: cfg}).TimeSlice()
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
// that some claim time-sliced. The caller holds the devices' locks; the
// claim's holders may or may not be gone yet. A time slice that cannot be
// restored does not fail it (see restoreTimeSlice).
func (m *Manager) releaseSharing(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	if m.cfg.MPS != nil {
		if err := m.cfg.MPS.StopClaim(ctx, rec.UID); err != nil {
			return err
		}
	}
	for _, d := range rec.Devices {
		if err := m.restoreTimeSlice(ctx, d.Name, rec.UID); err != nil {
			return err
		}
		m.restoreComputeMode(ctx, d.Name, rec.UID)
	}
	return nil
}

// restoreTimeSlice sets the default time slice again on a GPU that a claim
// time-sliced (its marker exists) once no claim other than uid holds it,
// and clears the marker. The GPU-setting is best effort: a GPU that does not
// answer (fallen off the bus, nvidia-smi failing) or that the node no longer
// has keeps its marker, which is the durable note to try again — at
// start-up (Recover) and when the next claim on that GPU is prepared or
// unprepared. Only a failure to read the holders is returned. The caller
// holds the device's lock.
func (m *Manager) restoreTimeSlice(ctx context.Context, device, uid string) error {
	uuid, marked, err := m.timeSliceMarked(device)
	if err != nil || !marked {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("device", device, "uuid", uuid)
	holders, err := m.cfg.Checkpoints.Holders(device)
	if err != nil {
		return tag(errCheckpoint, err)
	}
	if slices.ContainsFunc(holders, func(h checkpoint.Holder) bool { return h.ClaimUID != uid }) {
		logger.V(3).Info("Time slice kept: another claim holds the GPU")
		return nil
	}
	if gpu := m.gpus[device]; gpu == nil || gpu.UUID != uuid {
		logger.Info("Default time slice not restored: the node no longer has this GPU; retried when it is back")
		return nil
	}
	if err := m.setTimeSlice(ctx, uuid, v1alpha1.DefaultTimeSlice); err != nil {
		logger.Error(err, "Default time slice not restored; retried at start-up and with the next claim on this GPU")
		return nil
	}
	if err := m.markTimeSliced(device, uuid, false); err != nil {
		logger.Error(err, "Default time slice restored, but its marker stays; the restore is repeated later")
		return nil
	}
	logger.V(3).Info("Restored the default time slice")
	return nil
}

// timeSliceMarker exists while a GPU may have a time slice other than the
// default, whichever claim set it: the last claim to leave the GPU restores
// the default. It holds the GPU's UUID and lives in the node-wide lock
// directory (in the plugin's data directory, next to the checkpoint), where
// every plugin process — two during a rolling update — finds it.
func (m *Manager) timeSliceMarker(device string) string {
	return filepath.Join(m.cfg.LockDir, timeSliceMarkerPrefix+device)
}

const timeSliceMarkerPrefix = "timeslice."

// timeSliceMarked reads a GPU's marker: the UUID of the GPU it was set on.
func (m *Manager) timeSliceMarked(device string) (uuid string, marked bool, err error) {
	b, err := os.ReadFile(m.timeSliceMarker(device))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read the time-slice marker of %s: %w", device, err)
	}
	uuid = strings.TrimSpace(string(b))
	if gpu := m.gpus[device]; uuid == "" && gpu != nil {
		uuid = gpu.UUID // an empty marker of an older version
	}
	return uuid, true, nil
}

// markTimeSliced sets or clears a GPU's marker. A marker is written with
// atomicfile.WriteFile, so a crash never leaves one half written and a set
// marker survives a power loss. Its temp file (".timeslice.<device>.tmp-*")
// does not start with timeSliceMarkerPrefix, so timeSliceMarkers skips it.
func (m *Manager) markTimeSliced(device, uuid string, on bool) error {
	path := m.timeSliceMarker(device)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clear the time-slice marker of %s: %w", device, err)
		}
		return nil
	}
	if err := atomicfile.WriteFile(path, []byte(uuid), 0o600); err != nil {
		return fmt.Errorf("record the time slice of %s: %w", device, err)
	}
	return nil
}

// retryTimeSliceRestores tries again the restores that failed before (see
// restoreTimeSlice), each under its GPU's lock. It returns how many are
// still pending.
func (m *Manager) retryTimeSliceRestores(ctx context.Context) int {
	pending := 0
	for _, device := range m.timeSliceMarkers(ctx) {
		unlock, err := m.locks.lock([]string{device})
		if err != nil {
			klog.FromContext(ctx).Error(err, "Time-slice restore not retried", "device", device)
			pending++
			continue
		}
		err = m.restoreTimeSlice(ctx, device, "")
		if _, marked, _ := m.timeSliceMarked(device); err != nil || marked && !m.held(device) {
			pending++
		}
		unlock()
	}
	return pending
}

// timeSliceMarkers lists the devices that have a time-slice marker.
func (m *Manager) timeSliceMarkers(ctx context.Context) []string {
	entries, err := os.ReadDir(m.cfg.LockDir)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot list the time-slice markers", "dir", m.cfg.LockDir)
		return nil
	}
	var out []string
	for _, e := range entries {
		if d, ok := strings.CutPrefix(e.Name(), timeSliceMarkerPrefix); ok && validateLockName(d) == nil && e.Type().IsRegular() {
			out = append(out, d)
		}
	}
	return out
}

// held reports whether any claim holds device (an unreadable index counts
// as held).
func (m *Manager) held(device string) bool {
	hs, err := m.cfg.Checkpoints.Holders(device)
	return err != nil || len(hs) > 0
}

// restoreSharing brings a recovered claim's sharing back: compute modes and
// time slices set again (a GPU reset clears them), the MPS daemon adopted if it answers,
// whichever plugin instance started it, or started again (ensureMPS). It
// reports whether the daemon was started again.
func (m *Manager) restoreSharing(ctx context.Context, c *claimState) (bool, error) {
	if err := m.setComputeModes(ctx, c.rec.UID, c.sharingDevices()); err != nil {
		return false, err
	}
	for _, d := range c.sharingDevices() {
		if interval, ok := d.SetsTimeSlice(); ok {
			if err := m.setTimeSlice(ctx, d.UUID, interval); err != nil {
				return false, err
			}
		}
	}
	return m.ensureMPS(ctx, c.rec)
}

// withSharingEdits adds what reaching the MPS daemon of the device's
// configuration group needs (each device is served by one daemon at most).
func withSharingEdits(d cdi.ClaimDevice, uuid string, daemons []*sharing.MPSDaemon) cdi.ClaimDevice {
	for _, mps := range daemons {
		env, mounts := sharing.ContainerEdits(mps, uuid, d.RequestUUIDs)
		d.Env = append(d.Env, env...)
		d.Mounts = append(d.Mounts, mounts...)
	}
	return d
}

// deviceMemory is the memory of a published device (a GPU, or a MIG
// device of its profile), in bytes; 0 if unknown.
func (m *Manager) deviceMemory(name string) int64 {
	var b uint64
	if g, ok := m.gpus[name]; ok && g.PublishesWhole() {
		b = g.MemoryBytes
	} else if t, ok := m.migs[name]; ok {
		b = t.profile.MemoryBytes
		if t.static != nil {
			b = t.static.MemoryBytes
		}
	}
	return int64(min(b, math.MaxInt64))
}

// consumedMemory is the memory a share consumed, in bytes.
func consumedMemory(c claimconfig.DeviceConfig) int64 {
	q, ok := c.Result.ConsumedCapacity[slice.CapacityMemory]
	if !ok {
		return 0
	}
	return q.Value()
}
