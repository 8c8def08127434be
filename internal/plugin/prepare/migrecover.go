package prepare

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// reconcileMIG makes every dynamically partitioned GPU hold exactly the
// MIG devices of this boot's completed claims: instances that no completed
// record accounts for (a crash mid-prepare or mid-unprepare, or a layout
// made by hand) are destroyed, missing ones are created again at their
// recorded placement (their record and CDI spec then name the new UUID).
// Each GPU is settled under its lock, so a prepare of another plugin
// process is either finished or not begun. A device that cannot be
// destroyed or created is reported in rep.Failed, and the rest goes on.
func (m *Manager) reconcileMIG(ctx context.Context, rep *RecoverReport) {
	for i := range m.cfg.Node.GPUs {
		gpu := &m.cfg.Node.GPUs[i]
		if gpu.Partitioning != model.DynamicMIG {
			continue
		}
		if err := m.reconcileGPU(ctx, gpu, rep); err != nil {
			rep.Failed = append(rep.Failed, RecoverFailure{Device: gpu.DeviceName(),
				Err: fmt.Errorf("reconcile MIG devices of %s (%s): %w", gpu.DeviceName(), gpu.UUID, err)})
		}
	}
}

type wanted struct {
	rec *checkpoint.ClaimRecord
	idx int
}

func (m *Manager) reconcileGPU(ctx context.Context, gpu *model.GPU, rep *RecoverReport) error {
	logger := klog.FromContext(ctx)
	unlock, err := m.locks.lock([]string{gpu.DeviceName()})
	if err != nil {
		return err
	}
	defer unlock()
	loaded, err := m.cfg.Checkpoints.LoadAll()
	if err != nil {
		return err
	}
	want := map[int]wanted{}  // by placement start
	kept := map[string]bool{} // devices of interrupted claims whose rollback failed
	for _, rec := range loaded.Current {
		if rec.State != checkpoint.PrepareCompleted {
			for _, d := range rec.Devices {
				if d.MIG != nil && d.UUID != "" {
					kept[d.UUID] = true
				}
			}
			continue
		}
		for j, d := range rec.Devices {
			if d.MIG != nil && d.MIG.Dynamic && d.MIG.Parent == gpu.DeviceName() {
				want[d.MIG.Start] = wanted{rec: rec, idx: j}
			}
		}
	}
	insts, err := m.cfg.MIG.Instances(gpu.UUID, gpu.MIG)
	if err != nil {
		return err
	}
	for _, inst := range insts {
		w, ok := want[inst.Start]
		if ok {
			d := w.rec.Devices[w.idx]
			if d.MIG.GIID == inst.GIID && d.MIG.ProfileID == inst.ProfileID && d.UUID == inst.UUID {
				delete(want, inst.Start)
				continue
			}
		}
		if kept[inst.UUID] {
			continue // its claim's rollback failed and was reported; retried with that claim
		}
		logger.Info("Destroying MIG device no prepared claim accounts for", "gpu", gpu.DeviceName(),
			"uuid", inst.UUID, "gi", inst.GIID, "start", inst.Start)
		if err := m.cfg.MIG.Destroy(inst); err != nil {
			rep.Failed = append(rep.Failed, RecoverFailure{Device: gpu.DeviceName(),
				Err: fmt.Errorf("destroy MIG device %s of %s, which no prepared claim accounts for: %w", inst.UUID, gpu.DeviceName(), err)})
			continue
		}
		rep.MIGDestroyed++
	}
	for _, w := range want {
		if err := m.recreateMIG(ctx, w); err != nil {
			rep.failClaim(w.rec, fmt.Errorf("recover claim %s/%s: %w", w.rec.Namespace, w.rec.Name, err))
			continue
		}
		rep.MIGRecreated++
	}
	return nil
}

// recreateMIG creates a completed claim's missing MIG device again and
// rewrites its record and CDI spec.
func (m *Manager) recreateMIG(ctx context.Context, w wanted) error {
	rec := w.rec
	d := &rec.Devices[w.idx]
	t, ok := m.migs[d.Name]
	if !ok {
		return fmt.Errorf("MIG device %s is not a placement of this GPU's MIG profiles any more (did the driver change?); "+
			"drain the node, then remove %s", d.Name, m.cfg.Checkpoints.Path(rec.UID))
	}
	inst, err := m.cfg.MIG.Create(d.MIG.ParentUUID, t.profile, t.start)
	if err != nil {
		return fmt.Errorf("recreate MIG device %s: %w", d.Name, err)
	}
	klog.FromContext(ctx).Info("Recreated missing MIG device of a prepared claim", "claim", rec.Namespace+"/"+rec.Name,
		"device", d.Name, "oldUUID", d.UUID, "uuid", inst.UUID)
	d.UUID, d.MIG.GIID, d.MIG.CIID = inst.UUID, inst.GIID, inst.CIID
	if err := m.putRecord(rec, true); err != nil {
		return err
	}
	c, err := stateOf(rec)
	if err != nil {
		return err
	}
	devs, err := m.cdiDevices(c)
	if err != nil {
		return err
	}
	_, err = m.cfg.CDI.WriteClaim(rec.UID, devs)
	return err
}
