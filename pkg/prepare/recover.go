package prepare

import (
	"context"
	"errors"
	"fmt"
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
	known := map[string]bool{}
	for _, rec := range loaded.Stale {
		if err := m.discard(rec); err != nil {
			return rep, err
		}
		rep.Stale++
	}
	for _, rec := range loaded.Current {
		if rec.State != checkpoint.PrepareCompleted {
			logger.Info("Rolling back interrupted claim", "claim", rec.Namespace+"/"+rec.Name, "uid", rec.UID, "state", rec.State)
			if err := m.discard(rec); err != nil {
				return rep, err
			}
			rep.RolledBack++
			continue
		}
		if err := m.restore(rec, &rep); err != nil {
			return rep, err
		}
		known[rec.UID] = true
		rep.Restored++
	}
	if len(loaded.StaleCorrupt) > 0 {
		logger.Info("Discarding unreadable checkpoint records of an earlier boot", "count", len(loaded.StaleCorrupt),
			"first", loaded.StaleCorrupt[0].Error())
	}
	if err := m.cfg.Checkpoints.PruneStale(); err != nil {
		return rep, err
	}
	specs, err := m.cfg.CDI.ListClaims()
	if err != nil {
		return rep, err
	}
	for _, uid := range specs {
		if known[uid] {
			continue
		}
		if err := m.cfg.CDI.RemoveClaim(uid); err != nil {
			return rep, err
		}
		rep.OrphanSpecs++
	}
	logger.Info("Recovered prepared claims", "restored", rep.Restored, "rolledBack", rep.RolledBack,
		"stale", rep.Stale, "orphanSpecs", rep.OrphanSpecs, "specsRewritten", rep.SpecsRewritten)
	return rep, nil
}

// discard removes every trace of a claim that is not (or no longer) prepared.
func (m *Manager) discard(rec *checkpoint.ClaimRecord) error {
	if err := m.cfg.CDI.RemoveClaim(rec.UID); err != nil {
		return err
	}
	if err := m.cfg.Checkpoints.Delete(rec.UID); err != nil {
		return fmt.Errorf("remove checkpoint of claim %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	return nil
}

// restore re-registers a completed claim's devices and makes sure its spec
// exists, so containers that restart still find their devices.
func (m *Manager) restore(rec *checkpoint.ClaimRecord, rep *RecoverReport) error {
	ref := rec.Namespace + "/" + rec.Name
	plan := make([]planned, 0, len(rec.Devices))
	for _, d := range rec.Devices {
		gpu, ok := m.gpus[d.Name]
		if !ok || gpu.UUID != d.UUID {
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
	for _, p := range plan {
		m.own.add(p.record.Name, holder{claimUID: rec.UID, claim: ref, access: p.access})
	}
	ok, err := m.cfg.CDI.HasClaim(rec.UID)
	if err != nil || ok {
		return err
	}
	if _, err := m.cfg.CDI.WriteClaim(rec.UID, m.cdiDevices(plan)); err != nil {
		return fmt.Errorf("rewrite CDI spec of claim %s: %w", ref, err)
	}
	rep.SpecsRewritten++
	return nil
}
