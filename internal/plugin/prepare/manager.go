// Package prepare is the kubelet plugin's prepare/unprepare state machine.
//
// For each claim: resolve the devices allocated to it on this node and their
// GpuClaimParameters, record the claim as PrepareStarted in the checkpoint,
// write the claim's CDI spec, record PrepareCompleted. Unprepare removes the
// spec and then the record. Every step is idempotent, so a repeated call or a
// restart after a crash converges (see Recover).
//
// Locking is per claim and per device, never global: claims on different
// GPUs prepare in parallel. A claim takes its own lock, then its devices'
// in name order, so two claims that overlap cannot deadlock (locks.go).
package prepare

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Config wires a Manager.
type Config struct {
	// Names are the driver's names (compat.Resolve): its allocations and
	// opaque configurations are the ones of Names.Driver.
	Names compat.Names
	// PoolName is the node's pool (the node name).
	PoolName    string
	Node        *model.Node
	Checkpoints *checkpoint.Store
	CDI         *cdi.Writer
	// LockDir holds the per-device lock files; every plugin process of the
	// node must use the same directory (e.g. <plugin data dir>/locks).
	LockDir string
	// MIG creates and destroys dynamic MIG devices; needed when a GPU of
	// Node is dynamically partitioned.
	MIG *mig.Manager
	// TimeSlicer sets GPU time slices; nil refuses time-sliced claims.
	TimeSlicer sharing.TimeSlicer
	// ComputeMode reads and sets the compute mode of whole GPUs that MPS,
	// time-sliced and shared claims need; nil leaves it alone.
	ComputeMode sharing.ComputeModes
	// MPS runs the MPS control daemons; nil refuses MPS claims and shares.
	MPS *sharing.MPSControl
	// CleanupTimeout bounds an unprepare and the rollback of a failed
	// prepare (default 2m). Both run under a context of their own, not the
	// kubelet's: a deadline passing half-way must not leave a claim half
	// released.
	CleanupTimeout time.Duration
	// OnMPSDaemon is told about every prepared claim whose MPS control
	// daemon stopped answering and was started again (or could not be); it
	// must not block. Optional.
	OnMPSDaemon func(MPSDaemonEvent)
	// Passthrough rebinds GPUs for their vfio devices; nil when passthrough
	// (Names.Passthrough) is off.
	Passthrough *Passthrough
	// FabricPartitions activates the NVSwitch Fabric Manager partition of
	// each claim of whole GPUs or vfio devices (fabricpartition.go); nil
	// when --fabric-manager-partitioning is off.
	FabricPartitions FabricPartitions
	// SyncRecords fsyncs the records a restarted plugin relies on
	// (PrepareCompleted, and rewrites of completed claims) before their
	// rename. Off, every record is written without fsync: a crash of the
	// process keeps them (the kernel's page cache has them), and the one
	// thing an fsync protects against, a power loss, reboots the node,
	// which voids every record of the boot (checkpoint: records are grouped
	// by boot ID and an earlier boot's are discarded as a whole).
	SyncRecords bool
}

const defaultCleanupTimeout = 2 * time.Minute

// Manager prepares and unprepares claims. It keeps no state between calls
// that is not on disk: during a rolling update another plugin process works
// on the same node, and the kubelet may call either.
type Manager struct {
	cfg   Config
	gpus  map[string]*model.GPU // by device name; fixed at start
	migs  map[string]migTarget  // published MIG devices by name; fixed at start
	vfios map[string]*model.GPU // published vfio devices by name; fixed at start
	locks *deviceLocks
	// metrics is set by NewMetrics before serving; nil records nothing.
	metrics *Metrics
	// recoverFailed is what the last Recover could not settle (for metrics).
	recoverMu     sync.Mutex
	recoverFailed []RecoverFailure
	// mpsReplaced and mpsFailed count daemons of prepared claims found gone
	// and started again, or not (for metrics).
	mpsReplaced, mpsFailed atomic.Int64
}

// New creates a Manager. Call Recover before serving requests.
func New(cfg Config) (*Manager, error) {
	m := &Manager{cfg: cfg, gpus: make(map[string]*model.GPU, len(cfg.Node.GPUs)), migs: indexMIG(cfg.Node)}
	for i := range cfg.Node.GPUs {
		g := &cfg.Node.GPUs[i]
		m.gpus[g.DeviceName()] = g
	}
	if cfg.Names.Passthrough {
		if cfg.Passthrough == nil || cfg.Passthrough.Sysfs == nil {
			return nil, fmt.Errorf("passthrough is on but the prepare manager has no sysfs to rebind GPUs with")
		}
		m.vfios = indexVFIO(cfg.Node)
	}
	if len(m.migs) > 0 && cfg.MIG == nil {
		return nil, fmt.Errorf("the node publishes MIG devices but the prepare manager has no MIG manager")
	}
	if m.cfg.CleanupTimeout <= 0 {
		m.cfg.CleanupTimeout = defaultCleanupTimeout
	}
	locks, err := newDeviceLocks(cfg.LockDir)
	if err != nil {
		return nil, err
	}
	m.locks = locks
	return m, nil
}

// PrepareClaims prepares claims concurrently and returns one result per claim.
func (m *Manager) PrepareClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	return forEach(claims, func(c *resourceapi.ResourceClaim) (types.UID, kubeletplugin.PrepareResult) {
		start := time.Now()
		devs, err := m.Prepare(ctx, c)
		m.metrics.observe("prepare", start, err)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Prepare failed; the kubelet will retry", "claim", klog.KObj(c))
		}
		return c.UID, kubeletplugin.PrepareResult{Devices: devs, Err: err}
	})
}

// UnprepareClaims unprepares claims concurrently.
func (m *Manager) UnprepareClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) map[types.UID]error {
	return forEach(claims, func(c kubeletplugin.NamespacedObject) (types.UID, error) {
		start := time.Now()
		err := m.Unprepare(ctx, c)
		m.metrics.observe("unprepare", start, err)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Unprepare failed; the kubelet will retry", "claim", c.String())
		}
		return c.UID, err
	})
}

// forEach runs f for every item, concurrently when there is more than one
// (claims lock only their own devices), and collects the results by key.
func forEach[T any, R any](items []T, f func(T) (types.UID, R)) map[types.UID]R {
	results := make(map[types.UID]R, len(items))
	if len(items) == 1 {
		k, r := f(items[0])
		results[k] = r
		return results
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, item := range items {
		wg.Go(func() {
			k, r := f(item)
			mu.Lock()
			results[k] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return results
}

// Unprepare undoes Prepare. Unknown claims succeed (idempotency). It runs
// to the end under its own context, past the kubelet's deadline if need be:
// the kubelet's retry then finds nothing left to do.
func (m *Manager) Unprepare(ctx context.Context, claim kubeletplugin.NamespacedObject) error {
	ctx, cancel := m.cleanupContext(ctx)
	defer cancel()
	// Like Prepare's, the error does not name the claim.
	return m.unprepare(ctx, string(claim.UID))
}

func (m *Manager) unprepare(ctx context.Context, uid string) error {
	t := m.phases("unprepare")
	known := recordUnknown // see prepare
	unlockClaim, err := m.lockClaimKnowing(uid, &known)
	if err != nil {
		return err
	}
	t.done(PhaseLockClaim)
	defer func() {
		unlockClaim()
		t.done(PhaseUnlock)
	}()
	rec, err := m.cfg.Checkpoints.Get(uid)
	if err != nil {
		return tag(errCheckpoint, err)
	}
	t.done(PhaseCheckpointRead)
	known = knownFrom(rec != nil)
	if rec == nil {
		// Never prepared, or already unprepared: nothing is held. Removing
		// the spec is idempotent and cheap, so make sure none is left.
		err := m.cfg.CDI.RemoveClaim(uid)
		t.done(PhaseCDI)
		return tag(errCDI, err)
	}
	// The record's devices, even one the node no longer has: its
	// bookkeeping is released all the same.
	unlock, err := m.locks.lock(lockNames(rec.Devices))
	if err != nil {
		return err
	}
	defer unlock()
	t.done(PhaseLockDevices)
	if err := m.cfg.CDI.RemoveClaim(uid); err != nil {
		return tag(errCDI, err)
	}
	t.done(PhaseCDI)
	after(phaseUnprepareCDIRemoved)
	if err := m.releaseSharing(ctx, rec); err != nil {
		return err
	}
	t.done(PhaseSharing)
	if err := m.unbindVFIO(ctx, rec); err != nil {
		return err
	}
	// After the GPUs are back with nvidia, as NVIDIA's driver does.
	if err := m.releasePartition(ctx, rec); err != nil {
		return err
	}
	if err := m.unprepareMIG(ctx, rec); err != nil {
		return err
	}
	t.done(PhaseMIG)
	known = recordUnknown
	if err := m.forget(rec); err != nil {
		return err
	}
	known = recordAbsent
	t.done(PhaseHolders)
	klog.FromContext(ctx).V(3).Info("Unprepared claim", "claim", rec.Namespace+"/"+rec.Name, "devices", len(rec.Devices))
	return nil
}

// recordKnown says whether a claim has a record, as far as the holder of the
// claim's lock knows: what it read or wrote under the lock stays true until
// the lock is released.
type recordKnown int8

const (
	recordUnknown recordKnown = iota
	recordPresent
	recordAbsent
)

func knownFrom(present bool) recordKnown {
	if present {
		return recordPresent
	}
	return recordAbsent
}

// lockClaim takes a claim's lock (locks.go); its file goes with the claim's
// record.
func (m *Manager) lockClaim(uid string) (func(), error) { return m.lockClaimKnowing(uid, nil) }

// lockClaimKnowing is lockClaim for a caller that tells, through *known,
// whether the claim still has a record when it releases the lock; while
// that is recordUnknown (or known is nil) the release reads the record.
func (m *Manager) lockClaimKnowing(uid string, known *recordKnown) (func(), error) {
	return m.locks.lockClaim(uid, func() bool {
		if known != nil && *known != recordUnknown {
			return *known == recordPresent
		}
		rec, err := m.cfg.Checkpoints.Get(uid)
		return err != nil || rec != nil
	})
}

// cleanupContext detaches work that must finish from the kubelet's request
// (keeping its values, e.g. the logger) and bounds it by CleanupTimeout.
func (m *Manager) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CleanupTimeout)
}

// forget removes a claim's holders, then its record (holders never outlive
// their record). The caller holds the devices' locks.
func (m *Manager) forget(rec *checkpoint.ClaimRecord) error {
	for _, d := range rec.Devices {
		if err := m.cfg.Checkpoints.RemoveHolder(d.Name, rec.UID); err != nil {
			return tag(errCheckpoint, err)
		}
	}
	if err := m.cfg.Checkpoints.Delete(rec.UID); err != nil {
		return tag(errCheckpoint, err)
	}
	return nil
}
