package prepare

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/claimconfig"
	"github.com/gpudra/gpudra/internal/plugin/failpoint"
)

// ErrConflict marks a refusal to hand an exclusive GPU to a second claim.
var ErrConflict = errors.New("GPU already in use by another claim")

// Phases of a prepare, for crash testing: failpoints in test builds of the
// binary (internal/plugin/failpoint) and testHookAfter in unit tests.
const (
	phaseStarted             = failpoint.PrepareStarted
	phaseCDIWritten          = failpoint.PrepareCDIWritten
	phaseCompleted           = failpoint.PrepareCompleted
	phaseUnprepareCDIRemoved = failpoint.UnprepareCDIRemoved
)

// testHookAfter, when set by tests, runs after each phase of a prepare; a
// panic there simulates the process dying at that point.
var testHookAfter func(phase string)

func after(phase string) {
	failpoint.Inject(phase)
	if testHookAfter != nil {
		testHookAfter(phase)
	}
}

// Prepare prepares one claim and returns its devices for the kubelet.
// Calling it again for a prepared claim returns the same result.
func (m *Manager) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t := m.phases("prepare")
	configs, err := claimconfig.Resolve(claim, m.cfg.Names, m.cfg.PoolName)
	if err != nil {
		return nil, err
	}
	if len(configs) == 0 {
		return []kubeletplugin.Device{}, nil
	}
	// The error does not name the claim: whoever reports it does (the
	// kubelet's "NodePrepareResources failed for ResourceClaim <name>: ",
	// the log's claim key, the event on the claim).
	return m.prepare(ctx, claim, configs, t)
}

func (m *Manager) prepare(ctx context.Context, claim *resourceapi.ResourceClaim, configs []claimconfig.DeviceConfig, t *phaseTimer) ([]kubeletplugin.Device, error) {
	logger := klog.FromContext(ctx)
	ref := claim.Namespace + "/" + claim.Name
	uid := string(claim.UID)
	c, err := m.plan(claimRef{uid: uid, namespace: claim.Namespace, name: claim.Name}, configs)
	if err != nil {
		return nil, err
	}
	names := c.names()
	t.done(PhasePlan)
	// Whether the claim has a record when its lock is released, once known
	// here (what this call read or wrote under the lock): the release then
	// need not read the record again.
	known := recordUnknown
	unlockClaim, err := m.lockClaimKnowing(uid, &known)
	if err != nil {
		return nil, err
	}
	t.done(PhaseLockClaim)
	unlock, err := m.locks.lock(lockNames(c.rec.Devices))
	if err != nil {
		unlockClaim()
		return nil, err
	}
	defer func() {
		unlock()
		unlockClaim()
		t.done(PhaseUnlock)
	}()
	t.done(PhaseLockDevices)

	rec, err := m.cfg.Checkpoints.Get(uid)
	if err != nil {
		return nil, tag(errCheckpoint, err)
	}
	t.done(PhaseCheckpointRead)
	known = knownFrom(rec != nil)
	if rec != nil && rec.State == checkpoint.PrepareCompleted {
		if !sameDevices(rec, c.rec) {
			return nil, fmt.Errorf("already prepared with devices %v, but now allocated %v; unprepare it first",
				recordDeviceNames(rec), names)
		}
		rewritten, err := m.ensureSpec(rec)
		if err != nil {
			return nil, err
		}
		if rewritten {
			logger.Info("CDI spec of a prepared claim was missing; wrote it again", "claim", ref, "uid", uid)
		}
		// Its MPS daemon is adopted if it answers, started again if not.
		if _, err := m.ensureMPS(ctx, rec); err != nil {
			return nil, err
		}
		// Its partition active again, should Fabric Manager have lost it.
		if err := m.activatePartition(ctx, rec); err != nil {
			return nil, err
		}
		return m.kubeletDevices(rec), nil
	}
	if rec != nil {
		// An earlier attempt was interrupted; if it named other devices, drop
		// its holders there (only our own markers, under the claim's lock).
		if err := m.dropHoldersOutside(rec, names); err != nil {
			return nil, err
		}
		if err := m.teardownMIG(ctx, rec); err != nil {
			return nil, err
		}
	}

	for _, d := range c.devices {
		other, busy, err := m.conflict(d.Name, uid, d.access())
		if err == nil && !busy {
			other, busy, err = m.parentConflict(d, uid)
		}
		if err == nil && !busy {
			other, busy, err = m.siblingConflict(d, uid)
		}
		if err != nil {
			return nil, err
		}
		if busy {
			return nil, fmt.Errorf("%w: %s (%s) is prepared for claim %s (uid %s); "+
				"refusing to give an exclusive GPU to two claims — check for a stale allocation of that claim",
				ErrConflict, d.Name, d.UUID, other.Claim, other.ClaimUID)
		}
	}

	t.done(PhaseConflicts)

	// From here until PrepareCompleted is written, a failure rolls back and
	// may or may not leave the record.
	rec = c.rec
	known = recordUnknown
	// PrepareStarted only has to survive a crash of this process, not a power
	// loss (which reboots the node and voids every record), so no fsync.
	if err := m.putRecord(rec, false); err != nil {
		return nil, fmt.Errorf("record PrepareStarted: %w", err)
	}
	t.done(PhaseRecordStarted)
	if err := m.hold(rec); err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	t.done(PhaseHolders)
	after(phaseStarted)
	// From here on the checkpoint says a prepare is under way: a crash is
	// rolled back or completed by Recover; a failure is rolled back now.
	// The partition first, as NVIDIA's driver does: activation retrains
	// the GPUs' NVLinks, before anything uses them.
	if err := m.activatePartition(ctx, rec); err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	if err := m.realizeMIG(ctx, rec); err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	t.done(PhaseMIG)
	// Sharing comes after MIG: it applies to the MIG device's UUID.
	if err := m.applySharing(ctx, c); err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	t.done(PhaseSharing)
	// Passthrough last before the spec: the GPU leaves the nvidia driver.
	if err := m.bindVFIO(ctx, rec); err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	devs, err := m.cdiDevices(c)
	if err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	ids, err := m.cfg.CDI.WriteClaim(uid, devs)
	if err != nil {
		m.rollback(ctx, rec)
		return nil, tag(errCDI, err)
	}
	t.done(PhaseCDI)
	after(phaseCDIWritten)
	c.setCDIDeviceIDs(ids)
	rec.State = checkpoint.PrepareCompleted
	if err := m.putRecord(rec, true); err != nil {
		m.rollback(ctx, rec)
		return nil, fmt.Errorf("record PrepareCompleted: %w", err)
	}
	known = recordPresent
	t.done(PhaseRecordCompleted)
	after(phaseCompleted)
	logger.V(3).Info("Prepared claim", "claim", ref, "devices", names)
	return m.kubeletDevices(rec), nil
}

// ensureSpec writes the CDI spec of a completed claim again if it is
// missing, and reports whether it did. The caller holds the claim's lock.
func (m *Manager) ensureSpec(rec *checkpoint.ClaimRecord) (bool, error) {
	ok, err := m.cfg.CDI.HasClaim(rec.UID)
	if err != nil || ok {
		return false, tag(errCDI, err)
	}
	c, err := stateOf(rec)
	if err != nil {
		return false, err
	}
	devs, err := m.cdiDevices(c)
	if err != nil {
		return false, err
	}
	if _, err := m.cfg.CDI.WriteClaim(rec.UID, devs); err != nil {
		return false, tag(errCDI, err)
	}
	return true, nil
}

// cdiDevices lists, per device, the GPUs of the same request(s) (the
// device ordinals of the MPS memory limits).
func (m *Manager) cdiDevices(c *claimState) ([]cdi.ClaimDevice, error) {
	byRequest := c.uuidsByRequest()
	mps := mpsDaemons(c.rec)
	out := make([]cdi.ClaimDevice, 0, len(c.devices))
	for _, d := range c.devices {
		if d.VFIO != nil {
			cd, err := m.vfioClaimDevice(d)
			if err != nil {
				return nil, err
			}
			out = append(out, cd)
			continue
		}
		out = append(out, withSharingEdits(cdi.ClaimDevice{
			DeviceName:   d.Name,
			GPU:          m.gpuOf(*d.Device),
			MIG:          migInstance(*d.Device),
			RequestUUIDs: requestUUIDs(d, byRequest),
			Env:          sharingEnv(d.config),
		}, d.UUID, mps))
	}
	return out, nil
}

// sharingEnv tells the workload how its GPU is shared.
func sharingEnv(cfg *v1alpha1.GpuClaimParameters) []string {
	if cfg == nil || cfg.Sharing == nil {
		return nil
	}
	env := []string{"GPUDRA_SHARING_STRATEGY=" + string(cfg.Sharing.Strategy)}
	if cfg.Sharing.TimeSlicing != nil {
		env = append(env, "GPUDRA_TIMESLICE_INTERVAL="+string(cfg.Sharing.TimeSlicing.Interval))
	}
	return env
}

// rollback undoes a failed prepare, under its own context: the kubelet's
// may have expired, which is often why the prepare failed. A step that fails
// keeps the record, so the kubelet's retry or Recover finishes the job.
func (m *Manager) rollback(ctx context.Context, rec *checkpoint.ClaimRecord) {
	ctx, cancel := m.cleanupContext(ctx)
	defer cancel()
	logger := klog.FromContext(ctx)
	if err := m.cfg.CDI.RemoveClaim(rec.UID); err != nil {
		logger.Error(err, "Rollback: removing CDI spec failed; it will be retried at restart", "claimUID", rec.UID)
		return
	}
	// Sharing first: an MPS daemon may still use a MIG device.
	if err := m.releaseSharing(ctx, rec); err != nil {
		logger.Error(err, "Rollback: undoing the GPU sharing setup failed; it will be retried at restart", "claimUID", rec.UID)
		return
	}
	failpoint.Inject(failpoint.RollbackSharingReleased)
	if err := m.unbindVFIO(ctx, rec); err != nil {
		logger.Error(err, "Rollback: giving passed-through GPUs back to nvidia failed; it will be retried at restart", "claimUID", rec.UID)
		return
	}
	if err := m.releasePartition(ctx, rec); err != nil {
		logger.Error(err, "Rollback: deactivating the Fabric Manager partition failed; it will be retried at restart", "claimUID", rec.UID)
		return
	}
	if err := m.teardownMIG(ctx, rec); err != nil {
		logger.Error(err, "Rollback: destroying MIG devices failed; they will be destroyed at restart", "claimUID", rec.UID)
		return
	}
	if err := m.forget(rec); err != nil {
		logger.Error(err, "Rollback: removing checkpoint failed; it will be retried at restart", "claimUID", rec.UID)
	}
}

func kubeletDevices(rec *checkpoint.ClaimRecord) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(rec.Devices))
	for _, d := range rec.Devices {
		kd := kubeletplugin.Device{
			Requests:     slices.Clone(d.Requests),
			PoolName:     d.Pool,
			DeviceName:   d.Name,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs),
		}
		if d.ShareID != "" {
			id := types.UID(d.ShareID)
			kd.ShareID = &id
		}
		out = append(out, kd)
	}
	return out
}

// putRecord writes a checkpoint record and times it. A durable record is
// one a restarted plugin relies on; it is fsynced only with
// Config.SyncRecords (see there why not by default).
func (m *Manager) putRecord(rec *checkpoint.ClaimRecord, durable bool) error {
	start := time.Now()
	durable = durable && m.cfg.SyncRecords
	put := m.cfg.Checkpoints.PutVolatile
	if durable {
		put = m.cfg.Checkpoints.Put
	}
	err := put(rec)
	m.metrics.checkpointWrite(start, durable)
	return tag(errCheckpoint, err)
}
