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
	"github.com/gpudra/gpudra/pkg/cdi"
	"github.com/gpudra/gpudra/pkg/checkpoint"
	"github.com/gpudra/gpudra/pkg/claimconfig"
	"github.com/gpudra/gpudra/pkg/failpoint"
)

// ErrConflict marks a refusal to hand an exclusive GPU to a second claim.
var ErrConflict = errors.New("GPU already in use by another claim")

// Phases of a prepare, for crash testing: failpoints in test builds of the
// binary (pkg/failpoint) and testHookAfter in unit tests.
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

// planned is one device of a claim being prepared.
type planned struct {
	cfg    claimconfig.DeviceConfig
	record checkpoint.Device
	access access
}

// Prepare prepares one claim and returns its devices for the kubelet.
// Calling it again for a prepared claim returns the same result.
func (m *Manager) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t := m.phases("prepare")
	configs, err := claimconfig.Resolve(claim, m.cfg.DriverName, m.cfg.PoolName)
	if err != nil {
		return nil, err
	}
	if len(configs) == 0 {
		return []kubeletplugin.Device{}, nil
	}
	devs, err := m.prepare(ctx, claim, configs, t)
	if err != nil {
		return nil, fmt.Errorf("prepare claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return devs, nil
}

func (m *Manager) prepare(ctx context.Context, claim *resourceapi.ResourceClaim, configs []claimconfig.DeviceConfig, t *phaseTimer) ([]kubeletplugin.Device, error) {
	logger := klog.FromContext(ctx)
	ref := claim.Namespace + "/" + claim.Name
	uid := string(claim.UID)
	plan, err := m.plan(uid, configs)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(plan))
	for i, p := range plan {
		names[i] = p.record.Name
	}
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
	unlock, err := m.locks.lock(lockNames(plannedRecords(plan)))
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
		if !sameDevices(rec, plan) {
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
			return nil, fmt.Errorf("its MPS control daemon: %w", err)
		}
		return kubeletDevices(rec), nil
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

	for _, p := range plan {
		other, busy, err := m.conflict(p.record.Name, uid, p.access)
		if err == nil && !busy {
			other, busy, err = m.parentConflict(p, uid)
		}
		if err != nil {
			return nil, err
		}
		if busy {
			return nil, fmt.Errorf("%w: %s (%s) is prepared for claim %s (uid %s); "+
				"refusing to give an exclusive GPU to two claims — check for a stale allocation of that claim",
				ErrConflict, p.record.Name, p.record.UUID, other.Claim, other.ClaimUID)
		}
	}

	t.done(PhaseConflicts)

	rec = &checkpoint.ClaimRecord{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: checkpoint.PrepareStarted}
	for _, p := range plan {
		rec.Devices = append(rec.Devices, p.record)
	}
	// From here until PrepareCompleted is written, a failure rolls back and
	// may or may not leave the record.
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
	if err := m.realizeMIG(ctx, rec); err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	for i := range plan {
		plan[i].record = rec.Devices[i]
	}
	t.done(PhaseMIG)
	// Sharing comes after MIG: it applies to the MIG device's UUID.
	if err := m.applySharing(ctx, rec, plan); err != nil {
		m.rollback(ctx, rec)
		return nil, err
	}
	t.done(PhaseSharing)
	ids, err := m.cfg.CDI.WriteClaim(uid, m.cdiDevices(plan, rec.MPS))
	if err != nil {
		m.rollback(ctx, rec)
		return nil, tag(errCDI, err)
	}
	t.done(PhaseCDI)
	after(phaseCDIWritten)
	for i := range rec.Devices {
		rec.Devices[i].CDIDeviceIDs = []string{ids[rec.Devices[i].Name]}
	}
	rec.State = checkpoint.PrepareCompleted
	if err := m.putRecord(rec, true); err != nil {
		m.rollback(ctx, rec)
		return nil, fmt.Errorf("record PrepareCompleted: %w", err)
	}
	known = recordPresent
	t.done(PhaseRecordCompleted)
	after(phaseCompleted)
	logger.V(3).Info("Prepared claim", "claim", ref, "devices", names)
	return kubeletDevices(rec), nil
}

// ensureSpec writes the CDI spec of a completed claim again if it is
// missing, and reports whether it did. The caller holds the claim's lock.
func (m *Manager) ensureSpec(rec *checkpoint.ClaimRecord) (bool, error) {
	ok, err := m.cfg.CDI.HasClaim(rec.UID)
	if err != nil || ok {
		return false, tag(errCDI, err)
	}
	plan, err := plannedFromRecords(rec.Devices)
	if err != nil {
		return false, err
	}
	if _, err := m.cfg.CDI.WriteClaim(rec.UID, m.cdiDevices(plan, rec.MPS)); err != nil {
		return false, tag(errCDI, err)
	}
	return true, nil
}

// plan checks the allocation against the node and encodes each device's
// effective config for the checkpoint.
func (m *Manager) plan(uid string, configs []claimconfig.DeviceConfig) ([]planned, error) {
	plan := make([]planned, 0, len(configs))
	for _, c := range configs {
		admin := c.Result.AdminAccess != nil && *c.Result.AdminAccess
		gpu, ok := m.gpus[c.Result.Device]
		uuid := ""
		var migRec *checkpoint.MIG
		if ok && gpu.PublishesWhole() {
			uuid = gpu.UUID
		} else {
			var err error
			if migRec, uuid, err = m.migRecord(c.Result.Device, admin); err != nil {
				return nil, err
			}
		}
		raw, err := v1alpha1.Encode(c.Config)
		if err != nil {
			return nil, fmt.Errorf("encode config of device %s: %w", c.Result.Device, err)
		}
		d := checkpoint.Device{
			Pool:     c.Result.Pool,
			Name:     c.Result.Device,
			Requests: []string{c.Result.Request},
			UUID:     uuid,
			Config:   raw,
			MIG:      migRec,
		}
		if c.Result.ShareID != nil {
			d.ShareID = string(*c.Result.ShareID)
		}
		d.AdminAccess = admin
		p := planned{cfg: c, record: d, access: accessOf(d)}
		p.record.ConsumedMemory = consumedMemory(&p)
		plan = append(plan, p)
	}
	return mergeDuplicates(plan), nil
}

// mergeDuplicates folds results naming the same device (one device satisfying
// several requests is impossible today, but a device listed twice must not be
// prepared twice) into one entry with all requests.
func mergeDuplicates(plan []planned) []planned {
	out := plan[:0]
	seen := map[string]int{}
	for _, p := range plan {
		if i, ok := seen[p.record.Name]; ok {
			out[i].record.Requests = append(out[i].record.Requests, p.record.Requests...)
			continue
		}
		seen[p.record.Name] = len(out)
		out = append(out, p)
	}
	return out
}

// cdiDevices lists, per device, the GPUs of the same request(s): that is what
// NVIDIA_VISIBLE_DEVICES shows a container that uses those requests.
func (m *Manager) cdiDevices(plan []planned, mps *checkpoint.MPSDaemon) []cdi.ClaimDevice {
	byRequest := visibleByRequest(plan)
	out := make([]cdi.ClaimDevice, 0, len(plan))
	for _, p := range plan {
		out = append(out, withSharingEdits(cdi.ClaimDevice{
			DeviceName:   p.record.Name,
			GPU:          m.gpuOf(p.record),
			MIG:          migInstance(p.record),
			VisibleUUIDs: visibleUUIDs(p, byRequest),
			Env:          sharingEnv(p.cfg.Config),
		}, p.record.UUID, mps))
	}
	return out
}

func visibleByRequest(plan []planned) map[string][]string {
	byRequest := map[string][]string{}
	for _, p := range plan {
		for _, r := range p.record.Requests {
			byRequest[r] = append(byRequest[r], p.record.UUID)
		}
	}
	return byRequest
}

func visibleUUIDs(p planned, byRequest map[string][]string) []string {
	var visible []string
	for _, r := range p.record.Requests {
		for _, u := range byRequest[r] {
			if !slices.Contains(visible, u) {
				visible = append(visible, u)
			}
		}
	}
	return visible
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
	if err := m.teardownMIG(ctx, rec); err != nil {
		logger.Error(err, "Rollback: destroying MIG devices failed; they will be destroyed at restart", "claimUID", rec.UID)
		return
	}
	if err := m.forget(rec); err != nil {
		logger.Error(err, "Rollback: removing checkpoint failed; it will be retried at restart", "claimUID", rec.UID)
	}
}

func sameDevices(rec *checkpoint.ClaimRecord, plan []planned) bool {
	if len(rec.Devices) != len(plan) {
		return false
	}
	for i := range plan {
		// A dynamic MIG device has no UUID before it is created.
		if rec.Devices[i].Name != plan[i].record.Name || (plan[i].record.UUID != "" && rec.Devices[i].UUID != plan[i].record.UUID) {
			return false
		}
	}
	return true
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

// putRecord writes a checkpoint record, fsynced when durable, and times it.
func (m *Manager) putRecord(rec *checkpoint.ClaimRecord, durable bool) error {
	start := time.Now()
	put := m.cfg.Checkpoints.PutVolatile
	if durable {
		put = m.cfg.Checkpoints.Put
	}
	err := put(rec)
	m.metrics.checkpointWrite(start, durable)
	return tag(errCheckpoint, err)
}

// plannedFromRecords rebuilds a recorded claim's plan.
func plannedFromRecords(devs []checkpoint.Device) ([]planned, error) {
	plan := make([]planned, 0, len(devs))
	for _, d := range devs {
		p, err := plannedFromRecord(d)
		if err != nil {
			return nil, err
		}
		plan = append(plan, p)
	}
	return plan, nil
}

// plannedFromRecord rebuilds a planned device from its checkpoint entry.
func plannedFromRecord(d checkpoint.Device) (planned, error) {
	cfg, err := v1alpha1.Decode(d.Config)
	if err != nil {
		return planned{}, fmt.Errorf("config of device %s in checkpoint: %w", d.Name, err)
	}
	return planned{cfg: claimconfig.DeviceConfig{Config: cfg}, record: d, access: accessOf(d)}, nil
}

func accessOf(d checkpoint.Device) access {
	switch {
	case d.AdminAccess:
		return admin
	case d.ShareID != "":
		return share
	default:
		return exclusive
	}
}

func plannedRecords(plan []planned) []checkpoint.Device {
	out := make([]checkpoint.Device, len(plan))
	for i, p := range plan {
		out[i] = p.record
	}
	return out
}
