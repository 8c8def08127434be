package prepare

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/checkpoint"
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
}

// ErrCorruptCheckpoint is returned by Recover when a checkpoint record cannot
// be read. The plugin refuses to start rather than forget which GPUs are in use.
var ErrCorruptCheckpoint = errors.New("corrupted checkpoint")

// Recover brings the node to a consistent state after a restart, before any
// request is served: completed claims of this boot are kept (their CDI spec
// rewritten if missing), interrupted ones are rolled back, records of an
// earlier boot and CDI specs without a record are removed.
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
			"because it cannot know which GPUs they hold (README: 'Recovering a corrupted checkpoint'):\n  %s",
			ErrCorruptCheckpoint, len(loaded.Corrupt), strings.Join(msgs, "\n  "))
	}
	for _, rec := range loaded.Stale {
		// No process works on a claim of an earlier boot: no lock needed.
		if err := m.cfg.CDI.RemoveClaim(rec.UID); err != nil {
			return rep, err
		}
		rep.Stale++
	}
	if len(loaded.StaleCorrupt) > 0 {
		logger.Info("Discarding unreadable checkpoint records of an earlier boot", "count", len(loaded.StaleCorrupt),
			"first", loaded.StaleCorrupt[0].Error())
	}
	if err := m.cfg.Checkpoints.PruneStale(); err != nil {
		return rep, err
	}
	for _, rec := range loaded.Current {
		if err := m.recoverClaim(ctx, rec, &rep); err != nil {
			return rep, err
		}
	}
	if err := m.reconcileMIG(ctx, &rep); err != nil {
		return rep, err
	}
	if err := m.removeOrphans(&rep); err != nil {
		return rep, err
	}
	if err := m.removeMPSOrphans(ctx); err != nil {
		return rep, err
	}
	logger.Info("Recovered prepared claims", "restored", rep.Restored, "rolledBack", rep.RolledBack,
		"stale", rep.Stale, "orphanSpecs", rep.OrphanSpecs, "specsRewritten", rep.SpecsRewritten,
		"migDestroyed", rep.MIGDestroyed, "migRecreated", rep.MIGRecreated)
	return rep, nil
}

// recoverClaim settles one record of this boot under its devices' locks: if
// another plugin process (a rolling update) is preparing it right now, the
// lock waits for that to finish, and the record is read again.
func (m *Manager) recoverClaim(ctx context.Context, seen *checkpoint.ClaimRecord, rep *RecoverReport) error {
	unlock, err := m.locks.lock(lockNames(seen.Devices))
	if err != nil {
		return fmt.Errorf("claim %s/%s is prepared with a GPU this node no longer has: %w; "+
			"a GPU changed under a running workload — drain the node, then remove %s",
			seen.Namespace, seen.Name, err, m.cfg.Checkpoints.Path(seen.UID))
	}
	defer unlock()
	rec, err := m.cfg.Checkpoints.Get(seen.UID)
	switch {
	case err != nil:
		return err
	case rec == nil:
		return nil // unprepared meanwhile by another process
	case rec.State != checkpoint.PrepareCompleted:
		klog.FromContext(ctx).Info("Rolling back interrupted claim", "claim", rec.Namespace+"/"+rec.Name, "uid", rec.UID, "state", rec.State)
		if err := m.releaseSharing(ctx, rec); err != nil {
			return err
		}
		// Exactly the MIG devices the interrupted prepare recorded (also when
		// the GPU is no longer dynamically partitioned, so no sweep runs).
		if err := m.teardownMIG(ctx, rec); err != nil {
			return err
		}
		if err := m.discard(rec); err != nil {
			return err
		}
		rep.RolledBack++
		return nil
	default:
		if err := m.restore(ctx, rec, rep); err != nil {
			return err
		}
		rep.Restored++
		return nil
	}
}

// removeOrphans removes CDI specs and holders without a checkpoint record.
// A record is written before its spec and holders and removed after them,
// so "no record now" means orphaned, even with another process at work.
func (m *Manager) removeOrphans(rep *RecoverReport) error {
	specs, err := m.cfg.CDI.ListClaims()
	if err != nil {
		return err
	}
	for _, uid := range specs {
		rec, err := m.cfg.Checkpoints.Get(uid)
		if err != nil || rec != nil {
			continue // a corrupt record was reported above; a live one keeps its spec
		}
		if err := m.cfg.CDI.RemoveClaim(uid); err != nil {
			return err
		}
		rep.OrphanSpecs++
	}
	held, err := m.cfg.Checkpoints.HeldDevices()
	if err != nil {
		return err
	}
	for device, uids := range held {
		for _, uid := range uids {
			rec, err := m.cfg.Checkpoints.Get(uid)
			if err != nil {
				continue
			}
			if rec == nil || !slices.Contains(recordDeviceNames(rec), device) {
				if err := m.cfg.Checkpoints.RemoveHolder(device, uid); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// discard removes every trace of a claim that is not (or no longer) prepared.
func (m *Manager) discard(rec *checkpoint.ClaimRecord) error {
	if err := m.cfg.CDI.RemoveClaim(rec.UID); err != nil {
		return err
	}
	if err := m.forget(rec); err != nil {
		return fmt.Errorf("claim %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	return nil
}

// restore re-registers a completed claim's devices and makes sure its spec
// exists, so containers that restart still find their devices.
func (m *Manager) restore(ctx context.Context, rec *checkpoint.ClaimRecord, rep *RecoverReport) error {
	ref := rec.Namespace + "/" + rec.Name
	plan := make([]planned, 0, len(rec.Devices))
	for _, d := range rec.Devices {
		if !m.hasDevice(d) {
			return fmt.Errorf("claim %s is prepared with %s (%s), which this node no longer has; "+
				"a GPU changed under a running workload — drain the node, then remove %s",
				ref, d.Name, d.UUID, m.cfg.Checkpoints.Path(rec.UID))
		}
		p, err := plannedFromRecord(d)
		if err != nil {
			return fmt.Errorf("claim %s: %w", ref, err)
		}
		plan = append(plan, p)
	}
	if err := m.hold(rec); err != nil {
		return err
	}
	changed, err := m.restoreSharing(ctx, rec, plan)
	if err != nil {
		return fmt.Errorf("restore GPU sharing of claim %s: %w", ref, err)
	}
	if changed {
		if err := m.putRecord(rec, true); err != nil {
			return fmt.Errorf("record the new MPS daemon of claim %s: %w", ref, err)
		}
	}
	ok, err := m.cfg.CDI.HasClaim(rec.UID)
	if err != nil || ok {
		return err
	}
	if _, err := m.cfg.CDI.WriteClaim(rec.UID, m.cdiDevices(plan, rec.MPS)); err != nil {
		return fmt.Errorf("rewrite CDI spec of claim %s: %w", ref, err)
	}
	rep.SpecsRewritten++
	return nil
}
