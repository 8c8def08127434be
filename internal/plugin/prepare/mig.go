package prepare

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/failpoint"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// MIG devices in the prepare state machine.
//
// A MIG device is locked through its parent GPU: every change to one GPU's
// MIG layout (create, destroy, MIG mode) happens under that GPU's lock, in
// this process or another one (rolling update). For a dynamic MIG device
// the claim is recorded as PrepareStarted before the instance is created,
// again with the instance's IDs and UUID as soon as it exists (so that a
// retry or Recover destroys exactly what a crashed prepare created), and
// PrepareCompleted after; unprepare records UnprepareStarted before
// destroying it. A recorded instance is destroyed only if its GPU instance
// ID still names it (mig.Manager.Destroy). Recover destroys every instance
// on a dynamically partitioned GPU that no completed record accounts for,
// and recreates those of completed records that are missing.
//
// --mig-profiles only limits what is published: the MIG devices of every
// profile of the GPU's geometry are known here, so claims prepared under
// another setting keep working, and instances of any profile are seen by
// cleanup and by a switch to the whole GPU.

// phaseMIGCreated follows the creation of a claim's dynamic MIG devices.
const phaseMIGCreated = failpoint.PrepareMIGCreated

// migTarget is a published MIG device of this node.
type migTarget struct {
	gpu *model.GPU
	// profile and start place a dynamic MIG device.
	profile model.MIGProfile
	start   int
	// static is the existing device behind a static MIG device.
	static *model.MIGDevice
}

// indexMIG lists the node's MIG devices by device name: the existing ones
// of static MIG GPUs, every placement of every profile (published or not)
// of dynamically partitioned GPUs.
func indexMIG(node *model.Node) map[string]migTarget {
	out := map[string]migTarget{}
	for i := range node.GPUs {
		g := &node.GPUs[i]
		switch g.Partitioning {
		case model.StaticMIG:
			for j := range g.MIGDevices {
				d := &g.MIGDevices[j]
				out[model.MIGDeviceName(g, d.Profile, d.ProfileID, d.Start)] = migTarget{gpu: g, static: d}
			}
		case model.DynamicMIG:
			for _, p := range g.MIG.Profiles {
				for _, s := range p.Placements {
					out[model.MIGDeviceName(g, p.Name, p.ID, s)] = migTarget{gpu: g, profile: p, start: s}
				}
			}
		}
	}
	return out
}

// migRecord resolves an allocated MIG device into its checkpoint entry and
// its UUID (empty for a dynamic device not created yet).
func (m *Manager) migRecord(name string, adminAccess bool) (*checkpoint.MIG, string, error) {
	t, ok := m.migs[name]
	if !ok {
		return nil, "", fmt.Errorf("allocated device %q is not a GPU of node %s: %w", name, m.cfg.PoolName, ErrUnknownDevice)
	}
	rec := &checkpoint.MIG{Parent: t.gpu.DeviceName(), ParentUUID: t.gpu.UUID}
	if s := t.static; s != nil {
		rec.Profile, rec.ProfileID, rec.Start, rec.Size, rec.GIID, rec.CIID = s.Profile, s.ProfileID, s.Start, s.Size, s.GIID, s.CIID
		return rec, s.UUID, nil
	}
	if adminAccess {
		return nil, "", fmt.Errorf("device %s: adminAccess to a dynamic MIG device is not supported: it only exists while the claim that created it is prepared", name)
	}
	rec.Profile, rec.ProfileID, rec.Start, rec.Size = t.profile.Name, t.profile.ID, t.start, t.profile.PlacementSize
	rec.GIID, rec.CIID, rec.Dynamic = -1, -1, true
	return rec, "", nil
}

// lockName is the lock that guards a device: a MIG device's parent GPU, a
// vfio device's GPU.
func lockName(d checkpoint.Device) string {
	switch {
	case d.MIG != nil:
		return d.MIG.Parent
	case d.VFIO != nil:
		return d.VFIO.Parent
	}
	return d.Name
}

func lockNames(devs []checkpoint.Device) []string {
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		out = append(out, lockName(d))
	}
	return out
}

// gpuOf is the GPU a device is (or is part of).
func (m *Manager) gpuOf(d checkpoint.Device) *model.GPU { return m.gpus[lockName(d)] }

// hasDevice says whether a recorded device still exists on the node.
func (m *Manager) hasDevice(d checkpoint.Device) bool {
	gpu := m.gpuOf(d)
	switch {
	case gpu == nil:
		return false
	case d.MIG == nil:
		return gpu.UUID == d.UUID
	case d.MIG.ParentUUID != gpu.UUID:
		return false
	case d.MIG.Dynamic:
		return gpu.Partitioning == model.DynamicMIG
	default:
		t, ok := m.migs[d.Name]
		return ok && t.static != nil && t.static.UUID == d.UUID
	}
}

func migInstance(d checkpoint.Device) *cdi.MIGInstance {
	if d.MIG == nil {
		return nil
	}
	return &cdi.MIGInstance{UUID: d.UUID, GIID: d.MIG.GIID, CIID: d.MIG.CIID, Profile: d.MIG.Profile}
}

// parentConflict: a MIG device also conflicts with whoever holds its parent
// GPU (a whole-GPU claim that outlived its pod).
func (m *Manager) parentConflict(d device, uid string) (checkpoint.Holder, bool, error) {
	if d.MIG == nil {
		return checkpoint.Holder{}, false, nil
	}
	return m.conflict(d.MIG.Parent, uid, d.access())
}

// realizeMIG creates the claim's dynamic MIG devices and frees dynamically
// partitioned GPUs that are allocated whole (MIG mode off). rec's devices
// get the new devices' UUIDs and instance IDs. The caller holds the locks
// and has recorded rec as PrepareStarted.
func (m *Manager) realizeMIG(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	created := false
	for i := range rec.Devices {
		d := &rec.Devices[i]
		switch {
		case d.MIG != nil && d.MIG.Dynamic:
			t := m.migs[d.Name]
			inst, err := m.cfg.MIG.Create(d.MIG.ParentUUID, t.profile, t.start)
			if err != nil {
				// internal/plugin/mig names the profile, the placement and the GPU.
				return migError(fmt.Errorf("create MIG device %s: %w", d.Name, err))
			}
			d.UUID, d.MIG.GIID, d.MIG.CIID = inst.UUID, inst.GIID, inst.CIID
			created = true
			klog.FromContext(ctx).V(3).Info("Created MIG device", "device", d.Name, "uuid", inst.UUID, "gi", inst.GIID, "ci", inst.CIID)
			// Still PrepareStarted; like that state, it only has to survive a
			// crash of this process, so no fsync.
			if err := m.putRecord(rec, false); err != nil {
				return fmt.Errorf("record MIG device %s (%s): %w", d.Name, inst.UUID, err)
			}
		case d.MIG == nil:
			if gpu := m.gpus[d.Name]; gpu != nil && gpu.Partitioning == model.DynamicMIG && !d.AdminAccess {
				if err := m.cfg.MIG.ReleaseForWholeGPU(gpu.UUID, gpu.MIG); err != nil {
					return migError(fmt.Errorf("use %s as a whole GPU: %w", d.Name, err))
				}
			}
		}
	}
	if created {
		after(phaseMIGCreated)
	}
	return nil
}

// migError marks an occupied placement as a conflict (the scheduler should
// never allow it; a claim that outlived its pod can).
func migError(err error) error {
	if errors.Is(err, mig.ErrOccupied) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// teardownMIG destroys the dynamic MIG devices a record created. One that
// is gone is done with, also when another MIG device has its GPU instance
// ID now (it is not the claim's to destroy). So is one whose GPU the node
// no longer has, or whose GPU is lost, needs a reset or is no longer found
// (mig.ErrGPUNeedsReset: the reset or re-bind it needs clears its MIG
// devices): that does not keep the claim from being released.
func (m *Manager) teardownMIG(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	for _, d := range rec.Devices {
		if d.MIG == nil || !d.MIG.Dynamic || d.UUID == "" {
			continue
		}
		if gpu := m.gpuOf(d); gpu == nil || gpu.UUID != d.MIG.ParentUUID {
			continue
		}
		if m.cfg.MIG == nil {
			return fmt.Errorf("destroy MIG device %s (%s): the plugin runs without a MIG manager", d.Name, d.UUID)
		}
		err := m.cfg.MIG.Destroy(recordedInstance(d))
		switch {
		case errors.Is(err, mig.ErrReplaced):
			klog.FromContext(ctx).Info("MIG device of the claim is already gone; another MIG device has its GPU instance ID and is left alone",
				"claim", rec.Namespace+"/"+rec.Name, "device", d.Name, "uuid", d.UUID, "gi", d.MIG.GIID, "detail", err.Error())
		case errors.Is(err, mig.ErrGPUNeedsReset) || errors.Is(err, nvml.ERROR_GPU_IS_LOST):
			klog.FromContext(ctx).Info("MIG device of the claim not destroyed: its GPU is lost or needs a reset, which destroys it",
				"claim", rec.Namespace+"/"+rec.Name, "device", d.Name, "uuid", d.UUID, "detail", err.Error())
		case err != nil:
			return fmt.Errorf("destroy MIG device %s (%s): %w", d.Name, d.UUID, err)
		}
	}
	return nil
}

// recordedInstance is the MIG device a checkpoint entry names.
func recordedInstance(d checkpoint.Device) mig.Instance {
	return mig.Instance{ParentUUID: d.MIG.ParentUUID, ProfileID: d.MIG.ProfileID, Start: d.MIG.Start, Size: d.MIG.Size,
		GIID: d.MIG.GIID, CIID: d.MIG.CIID, UUID: d.UUID}
}

func hasDynamicMIG(rec *checkpoint.ClaimRecord) bool {
	for _, d := range rec.Devices {
		if d.MIG != nil && d.MIG.Dynamic {
			return true
		}
	}
	return false
}

// unprepareMIG records UnprepareStarted and destroys the claim's dynamic MIG
// devices. A crash in between leaves a record that Recover rolls back.
func (m *Manager) unprepareMIG(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	if !hasDynamicMIG(rec) {
		return nil
	}
	rec.State = checkpoint.UnprepareStarted
	if err := m.putRecord(rec, false); err != nil {
		return err
	}
	return m.teardownMIG(ctx, rec)
}
