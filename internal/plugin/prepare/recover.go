package prepare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
)

// RecoverReport says what Recover found and did.
type RecoverReport struct {
	// Restored claims are prepared and stay so (PrepareCompleted this boot).
	Restored int
	// RolledBack claims were mid-prepare or mid-unprepare when the plugin
	// stopped; their side effects were undone. The kubelet prepares them again.
	RolledBack int
	// Stale claims were prepared in an earlier boot and were cleaned up.
	Stale int
	// OrphanSpecs were CDI specs without a checkpoint record; removed.
	OrphanSpecs int
	// SpecsRewritten were missing for completed claims and written again.
	SpecsRewritten int
	// MIGDestroyed were dynamic MIG devices no completed claim accounts for.
	MIGDestroyed int
	// MIGRecreated were dynamic MIG devices of completed claims found missing.
	MIGRecreated int
	// TimeSliceRestoresPending are GPUs that no claim holds and whose default
	// time slice could not be restored yet (retried with their next claim).
	TimeSliceRestoresPending int
	// MPSReplaced are MPS control daemons of restored claims that no longer
	// answered (the plugin container that ran them was restarted) and were
	// started again; each is reported through Config.OnMPSDaemon.
	MPSReplaced int
	// Failed is what could not be settled; everything else was.
	Failed []RecoverFailure
}

// RecoverFailure is a claim, or a GPU, that Recover could not settle. A
// failed claim keeps its record, holders and CDI spec until the kubelet
// unprepares it, which tries again what failed (a device the node no longer
// has is then simply released).
type RecoverFailure struct {
	ClaimUID string
	// Claim is "namespace/name"; empty when only the UID is known (a CDI
	// spec or MPS daemon without a record).
	Claim string
	// Device is set for a failure of a GPU rather than of a claim: a MIG
	// device that no claim accounts for and that could not be destroyed.
	Device string
	Err    error
}

// ErrCorruptCheckpoint is returned by Recover when a checkpoint record cannot
// be read. The plugin refuses to start rather than forget which GPUs are in use.
var ErrCorruptCheckpoint = errors.New("corrupted checkpoint")

// testHookRemoveSpec, when set by tests, runs when Recover has decided to
// remove the CDI spec of a claim without a record of this boot, just before
// it does.
var testHookRemoveSpec func(uid string)

// Recover brings the node to a consistent state after a restart, before any
// request is served: completed claims of this boot are kept (their CDI spec
// rewritten if missing), interrupted ones are rolled back, records of an
// earlier boot and CDI specs without a record are removed. Each claim is
// settled on its own, under its locks (another plugin process may be at
// work during a rolling update): one that fails is reported in Failed and
// the others are served. Only an unreadable checkpoint fails Recover.
func (m *Manager) Recover(ctx context.Context) (RecoverReport, error) {
	logger := klog.FromContext(ctx)
	var rep RecoverReport
	loaded, err := m.cfg.Checkpoints.LoadAll()
	if err != nil {
		return rep, fmt.Errorf("load checkpoint: %w", err)
	}
	if len(loaded.Corrupt) > 0 {
		msgs := make([]string, 0, len(loaded.Corrupt))
		for _, c := range loaded.Corrupt {
			msgs = append(msgs, c.Error())
		}
		return rep, fmt.Errorf("%w: %d record(s) cannot be read; the plugin will not start until they are resolved, "+
			"because it cannot know which GPUs they hold (docs/reliability.md, 'Recovering a corrupted checkpoint'):\n  %s",
			ErrCorruptCheckpoint, len(loaded.Corrupt), strings.Join(msgs, "\n  "))
	}
	for _, rec := range loaded.Stale {
		if err := m.removeStale(rec, &rep); err != nil {
			rep.failClaim(rec, fmt.Errorf("claim %s/%s of an earlier boot: %w", rec.Namespace, rec.Name, err))
		}
	}
	if len(loaded.StaleCorrupt) > 0 {
		logger.Info("Discarding unreadable checkpoint records of an earlier boot", "count", len(loaded.StaleCorrupt),
			"first", loaded.StaleCorrupt[0].Error())
	}
	if err := m.cfg.Checkpoints.PruneStale(); err != nil {
		logger.Error(err, "Records of an earlier boot not removed; tried again at the next start")
	}
	for _, rec := range loaded.Current {
		if err := m.recoverClaim(ctx, rec, &rep); err != nil {
			rep.failClaim(rec, fmt.Errorf("recover claim %s/%s: %w", rec.Namespace, rec.Name, err))
		}
	}
	m.reconcileMIG(ctx, &rep)
	m.removeOrphans(ctx, &rep)
	m.removeMPSOrphans(ctx, &rep)
	rep.TimeSliceRestoresPending = m.retryTimeSliceRestores(ctx)
	m.retryComputeModeRestores(ctx)

	for _, f := range rep.Failed {
		logger.Error(f.Err, "Recovery failed; the claim stays recorded until the kubelet unprepares it",
			"claim", f.Claim, "claimUID", f.ClaimUID, "device", f.Device)
	}
	m.recoverMu.Lock()
	m.recoverFailed = rep.Failed
	m.recoverMu.Unlock()
	logger.Info("Recovered prepared claims", "restored", rep.Restored, "rolledBack", rep.RolledBack,
		"stale", rep.Stale, "orphanSpecs", rep.OrphanSpecs, "specsRewritten", rep.SpecsRewritten,
		"migDestroyed", rep.MIGDestroyed, "migRecreated", rep.MIGRecreated,
		"timeSliceRestoresPending", rep.TimeSliceRestoresPending, "mpsReplaced", rep.MPSReplaced, "failed", len(rep.Failed))
	return rep, nil
}

func (r *RecoverReport) failClaim(rec *checkpoint.ClaimRecord, err error) {
	r.Failed = append(r.Failed, RecoverFailure{ClaimUID: rec.UID, Claim: rec.Namespace + "/" + rec.Name, Err: err})
}

// removeStale removes the CDI spec of a claim prepared in an earlier boot,
// under the claim's lock: the other plugin process may have prepared it
// again in this boot (the kubelet does after a reboot), and then the spec
// is that prepare's.
func (m *Manager) removeStale(rec *checkpoint.ClaimRecord, rep *RecoverReport) error {
	unlock, err := m.lockClaim(rec.UID)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := m.cfg.Checkpoints.Get(rec.UID)
	if err != nil {
		return err
	}
	if cur == nil {
		if testHookRemoveSpec != nil {
			testHookRemoveSpec(rec.UID)
		}
		if err := m.cfg.CDI.RemoveClaim(rec.UID); err != nil {
			return err
		}
	}
	rep.Stale++
	return nil
}

// recoverClaim settles one record of this boot under its locks: if another
// plugin process (a rolling update) is preparing it right now, the lock
// waits for that to finish, and the record is read again.
func (m *Manager) recoverClaim(ctx context.Context, seen *checkpoint.ClaimRecord, rep *RecoverReport) error {
	unlockClaim, err := m.lockClaim(seen.UID)
	if err != nil {
		return err
	}
	defer unlockClaim()
	rec, err := m.cfg.Checkpoints.Get(seen.UID)
	if err != nil || rec == nil {
		return err // nil: unprepared meanwhile by another process
	}
	unlock, err := m.locks.lock(lockNames(rec.Devices))
	if err != nil {
		return err
	}
	defer unlock()
	if rec.State != checkpoint.PrepareCompleted {
		klog.FromContext(ctx).Info("Rolling back interrupted claim", "claim", rec.Namespace+"/"+rec.Name, "uid", rec.UID, "state", rec.State)
		if err := m.rollBackInterrupted(ctx, rec); err != nil {
			return err
		}
		rep.RolledBack++
		return nil
	}
	if err := m.restore(ctx, rec, rep); err != nil {
		return err
	}
	rep.Restored++
	return nil
}

// rollBackInterrupted undoes what a prepare or unprepare that was cut short
// left. A step that fails keeps the record, so that the kubelet's next
// prepare or unprepare of the claim tries again.
func (m *Manager) rollBackInterrupted(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	if err := m.cfg.CDI.RemoveClaim(rec.UID); err != nil {
		return err
	}
	if err := m.releaseSharing(ctx, rec); err != nil {
		return err
	}
	if err := m.unbindVFIO(ctx, rec); err != nil {
		return err
	}
	if err := m.releasePartition(ctx, rec); err != nil {
		return err
	}
	// Exactly the MIG devices the interrupted prepare or unprepare recorded
	// (also when the GPU is no longer dynamically partitioned, so that no
	// sweep runs); reconcileMIG destroys what no record names.
	if err := m.teardownMIG(ctx, rec); err != nil {
		return err
	}
	return m.forget(rec)
}

// restore re-registers a completed claim's devices and makes sure its spec
// exists, so containers that restart still find their devices.
func (m *Manager) restore(ctx context.Context, rec *checkpoint.ClaimRecord, rep *RecoverReport) error {
	for _, d := range rec.Devices {
		if !m.hasDevice(d) {
			return fmt.Errorf("it is prepared with %s (%s), which this node no longer has (removed, or not discovered "+
				"at this start); its containers cannot use it, and the claim is released when the kubelet unprepares it "+
				"(delete its pods)", d.Name, d.UUID)
		}
	}
	c, err := stateOf(rec)
	if err != nil {
		return err
	}
	if err := m.hold(rec); err != nil {
		return err
	}
	rewritten, err := m.ensureSpec(rec)
	if err != nil {
		return err
	}
	if rewritten {
		rep.SpecsRewritten++
	}
	replaced, err := m.restoreSharing(ctx, c)
	if replaced {
		rep.MPSReplaced++
	}
	if err != nil {
		return fmt.Errorf("restore its GPU sharing: %w", err)
	}
	return nil
}

// removeOrphans removes CDI specs and holders without a checkpoint record,
// each under its claim's lock (and a holder under its device's): a record
// is written before its spec and holders and removed after them, so "no
// record" under the lock means orphaned, even with another process at work.
func (m *Manager) removeOrphans(ctx context.Context, rep *RecoverReport) {
	logger := klog.FromContext(ctx)
	specs, err := m.cfg.CDI.ListClaims()
	if err != nil {
		logger.Error(err, "CDI specs without a record not removed; tried again at the next start")
	}
	for _, uid := range specs {
		removed, err := m.removeOrphanSpec(uid)
		if err != nil {
			rep.Failed = append(rep.Failed, RecoverFailure{ClaimUID: uid, Err: err})
		}
		if removed {
			rep.OrphanSpecs++
		}
	}
	m.removeClaimLockFiles(ctx)
	held, err := m.cfg.Checkpoints.HeldDevices()
	if err != nil {
		logger.Error(err, "Holders without a record not removed; tried again at the next start")
	}
	for device, uids := range held {
		for _, uid := range uids {
			if err := m.removeOrphanHolder(device, uid); err != nil {
				rep.Failed = append(rep.Failed, RecoverFailure{ClaimUID: uid, Device: device, Err: err})
			}
		}
	}
}

// removeClaimLockFiles removes the lock files of claims without a record
// that a crash left behind (a release removes them otherwise).
func (m *Manager) removeClaimLockFiles(ctx context.Context) {
	entries, err := os.ReadDir(filepath.Join(m.cfg.LockDir, claimLockDir))
	if err != nil {
		klog.FromContext(ctx).Error(err, "Lock files of claims without a record not removed")
		return
	}
	for _, e := range entries {
		if uid, ok := strings.CutSuffix(e.Name(), ".lock"); ok {
			if unlock, err := m.lockClaim(uid); err == nil {
				unlock() // removes the file if the claim has no record
			}
		}
	}
}

func (m *Manager) removeOrphanSpec(uid string) (bool, error) {
	unlock, err := m.lockClaim(uid)
	if err != nil {
		return false, err
	}
	defer unlock()
	rec, err := m.cfg.Checkpoints.Get(uid)
	if err != nil || rec != nil {
		return false, nil // a corrupt record was reported above; a live one keeps its spec
	}
	if testHookRemoveSpec != nil {
		testHookRemoveSpec(uid)
	}
	if err := m.cfg.CDI.RemoveClaim(uid); err != nil {
		return false, err
	}
	return true, nil
}

func (m *Manager) removeOrphanHolder(device, uid string) error {
	unlockClaim, err := m.lockClaim(uid)
	if err != nil {
		return err
	}
	defer unlockClaim()
	unlock, err := m.locks.lock([]string{device})
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := m.cfg.Checkpoints.Get(uid)
	if err != nil || rec != nil && slices.Contains(recordDeviceNames(rec), device) {
		return nil
	}
	return m.cfg.Checkpoints.RemoveHolder(device, uid)
}

// removeMPSOrphans stops daemons whose claim has no record, each under the
// claim's lock.
func (m *Manager) removeMPSOrphans(ctx context.Context, rep *RecoverReport) {
	if m.cfg.MPS == nil {
		return
	}
	known := func(uid string) bool {
		rec, err := m.cfg.Checkpoints.Get(uid)
		return err != nil || rec != nil
	}
	orphans, err := m.cfg.MPS.Orphans(ctx, known)
	if err != nil {
		klog.FromContext(ctx).Error(err, "MPS control daemons without a record not stopped; tried again at the next start")
		return
	}
	for _, uid := range orphans {
		if err := m.stopOrphanMPS(ctx, uid, known); err != nil {
			rep.Failed = append(rep.Failed, RecoverFailure{ClaimUID: uid, Err: err})
		}
	}
}

func (m *Manager) stopOrphanMPS(ctx context.Context, uid string, known func(string) bool) error {
	unlock, err := m.lockClaim(uid)
	if err != nil {
		return err
	}
	defer unlock()
	if known(uid) {
		return nil
	}
	klog.FromContext(ctx).Info("Stopping MPS control daemon of an unknown claim", "claimUID", uid)
	return m.cfg.MPS.StopClaim(ctx, uid)
}
