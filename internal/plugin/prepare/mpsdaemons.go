package prepare

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// MPS control daemons of prepared claims. A daemon runs in the PID namespace
// and cgroup of the plugin instance that started it: a restart of the
// plugin's container, or the old pod of a rolling update exiting, ends it.
// Whoever finds a prepared claim's daemon not answering — recovery at start,
// a repeated prepare, or the periodic check (CheckMPSDaemons) — starts it
// again under the claim's lock and reports it (Config.OnMPSDaemon), because
// the claim's CUDA processes that were connected to the old one must be
// restarted.

// MPSDaemonEvent is a prepared claim whose MPS control daemon did not
// answer: it was started again (Err nil) or could not be (Err set).
type MPSDaemonEvent struct {
	ClaimUID string
	// Claim is "namespace/name".
	Claim string
	// Group is the daemon's configuration group (0: the claim's first).
	Group int
	// OldPID and NewPID are the daemon's PIDs, each in the PID namespace of
	// the plugin instance that started it; NewPID is 0 if none was started.
	OldPID, NewPID int
	// Reason is why the old daemon counted as gone.
	Reason string
	// Err is why a new one could not be started (it does not repeat Reason).
	Err error
}

// ensureMPS makes sure every daemon of a completed claim answers, starting
// again each that does not (the record is then rewritten with the new
// PIDs). The caller holds the claim's lock. It reports whether a daemon was
// replaced; it tries every group even if one fails.
func (m *Manager) ensureMPS(ctx context.Context, rec *checkpoint.ClaimRecord) (bool, error) {
	if rec.MPS == nil {
		return false, nil
	}
	if m.cfg.MPS == nil {
		return false, fmt.Errorf("it has an MPS control daemon, but the plugin runs without an MPS control binary (--mps-control-path)")
	}
	daemons := mpsDaemons(rec)
	replaced, changed := false, false
	var errs []error
	for _, d := range daemons {
		res, err := m.cfg.MPS.Ensure(ctx, rec.UID, d)
		if !res.Replaced {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		replaced = true
		ev := MPSDaemonEvent{ClaimUID: rec.UID, Claim: rec.Namespace + "/" + rec.Name, Group: d.Group, OldPID: res.OldPID, Reason: res.Reason, Err: err}
		if err != nil {
			// The event has the reason and the error apart; the caller's
			// error names each once.
			errs = append(errs, fmt.Errorf("group %d: %s; a new one could not be started: %w", d.Group, res.Reason, err))
		} else {
			ev.NewPID, changed = d.PID, true
		}
		m.reportMPS(ctx, ev)
	}
	if changed {
		setMPS(rec, daemons)
		if err := m.putRecord(rec, true); err != nil {
			errs = append(errs, fmt.Errorf("record its new MPS control daemon: %w", err))
		}
	}
	return replaced, errors.Join(errs...)
}

// reportMPS counts, logs and hands on a replaced (or lost) daemon.
func (m *Manager) reportMPS(ctx context.Context, ev MPSDaemonEvent) {
	logger := klog.FromContext(ctx).WithValues("claim", ev.Claim, "claimUID", ev.ClaimUID, "group", ev.Group, "oldPID", ev.OldPID, "reason", ev.Reason)
	if ev.Err != nil {
		m.mpsFailed.Add(1)
		logger.Error(ev.Err, "MPS control daemon of a prepared claim is gone and could not be started again")
	} else {
		m.mpsReplaced.Add(1)
		logger.Info("MPS control daemon of a prepared claim was gone and has been started again; "+
			"CUDA processes connected to the old one must be restarted", "newPID", ev.NewPID)
	}
	if m.cfg.OnMPSDaemon != nil {
		m.cfg.OnMPSDaemon(ev)
	}
}

// CheckMPSDaemons checks the MPS control daemon of every prepared claim
// that has one, each under the claim's lock (off the prepare path: the
// kubelet's calls for other claims are not held up), and starts again each
// one that no longer answers — typically because the plugin instance that
// started it was stopped (a rolling update's old pod exiting). A claim whose
// GPU the node no longer has is left alone. It returns how many daemons it
// started.
func (m *Manager) CheckMPSDaemons(ctx context.Context) int {
	if m.cfg.MPS == nil {
		return 0
	}
	loaded, err := m.cfg.Checkpoints.LoadAll()
	if err != nil {
		klog.FromContext(ctx).Error(err, "MPS control daemons not checked: the checkpoint cannot be read")
		return 0
	}
	started := 0
	for _, seen := range loaded.Current {
		if seen.MPS == nil || seen.State != checkpoint.PrepareCompleted || ctx.Err() != nil {
			continue
		}
		if replaced, err := m.checkMPS(ctx, seen.UID); err == nil && replaced {
			started++
		}
	}
	return started
}

func (m *Manager) checkMPS(ctx context.Context, uid string) (bool, error) {
	unlock, err := m.lockClaim(uid)
	if err != nil {
		return false, err
	}
	defer unlock()
	rec, err := m.cfg.Checkpoints.Get(uid)
	if err != nil || rec == nil || rec.MPS == nil || rec.State != checkpoint.PrepareCompleted {
		return false, err // unprepared meanwhile
	}
	for _, d := range rec.Devices {
		if !m.hasDevice(d) {
			klog.FromContext(ctx).V(3).Info("MPS control daemon not checked: the claim's GPU is gone", "claimUID", uid, "device", d.Name)
			return false, nil
		}
	}
	return m.ensureMPS(ctx, rec)
}

// mpsDaemons are a claim's recorded daemons as internal/plugin/sharing runs
// them, group 0's first (nil: none).
func mpsDaemons(rec *checkpoint.ClaimRecord) []*sharing.MPSDaemon {
	var out []*sharing.MPSDaemon
	for _, r := range rec.MPSDaemons() {
		out = append(out, &sharing.MPSDaemon{Group: r.Group, PID: r.PID, Dir: r.Dir, Devices: slices.Clone(r.Devices),
			ActiveThreadPercentage: r.ActiveThreadPercentage, PinnedMemoryLimits: slices.Clone(r.PinnedMemoryLimits)})
	}
	return out
}

// setMPS records a claim's daemons (PlanMPS's order: group 0 first).
func setMPS(rec *checkpoint.ClaimRecord, daemons []*sharing.MPSDaemon) {
	out := make([]checkpoint.MPSDaemon, 0, len(daemons))
	for _, d := range daemons {
		out = append(out, checkpoint.MPSDaemon{Group: d.Group, PID: d.PID, Dir: d.Dir, Devices: slices.Clone(d.Devices),
			ActiveThreadPercentage: d.ActiveThreadPercentage, PinnedMemoryLimits: slices.Clone(d.PinnedMemoryLimits)})
	}
	rec.SetMPSDaemons(out)
}
