package prepare

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/failpoint"
)

// FabricPartitions is what the Manager needs of NVSwitch Fabric Manager
// (internal/plugin/fabricmanager.Manager; Config.FabricPartitions, nil when
// --fabric-manager-partitioning is off). Activate and Deactivate change
// the fabric only when its state differs, report whether they did, and are
// serialized node-wide (the fabric is the node's, not a device's).
type FabricPartitions interface {
	// Find is the partition whose GPUs are exactly these module IDs.
	Find(modules []int) (int, bool)
	Activate(ctx context.Context, id int) (bool, error)
	Deactivate(ctx context.Context, id int) (bool, error)
}

// phaseFabricPartitionActivated: the claim's partition is active.
const phaseFabricPartitionActivated = failpoint.PrepareFabricPartitionActivated

// planPartition records in the PrepareStarted record the partition that
// the claim's whole GPUs and vfio devices form (MIG devices are not
// partitioned), before anything changes: a claim whose GPUs form none
// fails here. With a partition recorded, whoever undoes the claim — the
// rollback, Recover after a crash, unprepare after a restart — knows what
// to deactivate.
func (m *Manager) planPartition(rec *checkpoint.ClaimRecord) error {
	if m.cfg.FabricPartitions == nil {
		return nil
	}
	var modules []int
	var names []string
	for _, d := range rec.Devices {
		if d.MIG != nil {
			continue
		}
		g := m.gpuOf(d)
		if g == nil {
			continue
		}
		if g.ModuleID == 0 {
			return fmt.Errorf("device %s: NVML reports no module ID for GPU %s, so NVSwitch Fabric Manager cannot tell which partition it is in", d.Name, g.UUID)
		}
		if !slices.Contains(modules, g.ModuleID) {
			modules = append(modules, g.ModuleID)
			names = append(names, d.Name)
		}
	}
	if len(modules) == 0 {
		return nil
	}
	slices.Sort(modules)
	id, ok := m.cfg.FabricPartitions.Find(modules)
	if !ok {
		return fmt.Errorf("devices %v (GPU modules %v) do not form an NVSwitch Fabric Manager partition of this node: "+
			"allocate GPUs that do, e.g. with a matchAttribute on partition%d (the ID of the %d-GPU partition holding each GPU)",
			names, modules, len(modules), len(modules))
	}
	rec.FabricPartition = &checkpoint.FabricPartition{ID: id, Modules: modules}
	return nil
}

// activatePartition activates the claim's recorded partition; one already
// active is left as it is. The caller holds the claim's locks and has
// written the record. A claim prepared while partitioning was on, repeated
// with it off, is left as it is.
func (m *Manager) activatePartition(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	p := rec.FabricPartition
	if p == nil || m.cfg.FabricPartitions == nil {
		return nil
	}
	activated, err := m.cfg.FabricPartitions.Activate(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("activate NVSwitch Fabric Manager partition %d (GPU modules %v): %w", p.ID, p.Modules, err)
	}
	klog.FromContext(ctx).V(3).Info("Fabric Manager partition active", "claimUID", rec.UID, "partition", p.ID,
		"modules", p.Modules, "activated", activated)
	after(phaseFabricPartitionActivated)
	return nil
}

// releasePartition deactivates the claim's recorded partition, unless it is
// inactive already or another prepared claim holds one of its GPUs (shares,
// admin access). Safe at any point of a rollback. With partitioning turned
// off since, it is left active (logged): a stale active partition blocks
// nothing that a claim stuck in unprepare would not.
func (m *Manager) releasePartition(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	p := rec.FabricPartition
	if p == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	if m.cfg.FabricPartitions == nil {
		logger.Info("Claim used an NVSwitch Fabric Manager partition, but partitioning is off on this plugin: partition left as it is",
			"claimUID", rec.UID, "partition", p.ID)
		return nil
	}
	other, err := m.partitionHeldElsewhere(rec)
	if err != nil {
		return err
	}
	if other != "" {
		logger.V(2).Info("Fabric Manager partition still used by another claim; not deactivated", "claimUID", rec.UID,
			"partition", p.ID, "otherClaim", other)
		return nil
	}
	deactivated, err := m.cfg.FabricPartitions.Deactivate(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("deactivate NVSwitch Fabric Manager partition %d (GPU modules %v): %w", p.ID, p.Modules, err)
	}
	logger.V(3).Info("Fabric Manager partition inactive", "claimUID", rec.UID, "partition", p.ID, "deactivated", deactivated)
	return nil
}

// partitionHeldElsewhere names a claim other than rec's that holds a GPU of
// rec's partition (its GPU or vfio device), or "".
func (m *Manager) partitionHeldElsewhere(rec *checkpoint.ClaimRecord) (string, error) {
	for i := range m.cfg.Node.GPUs {
		g := &m.cfg.Node.GPUs[i]
		if g.ModuleID == 0 || !slices.Contains(rec.FabricPartition.Modules, g.ModuleID) {
			continue
		}
		devices := []string{g.DeviceName()}
		if m.vfios[g.VFIODeviceName()] != nil {
			devices = append(devices, g.VFIODeviceName())
		}
		for _, name := range devices {
			h, held, err := m.otherHolder(name, rec.UID)
			if err != nil || held {
				return h.Claim, err
			}
		}
	}
	return "", nil
}
