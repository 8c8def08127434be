package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
)

// claimKey identifies a claim whose status.devices entries to reconcile.
type claimKey struct {
	Namespace, Name string
	UID             types.UID
}

// DeviceData is what the plugin writes into a claim's
// status.devices[].data for each prepared device.
type DeviceData struct {
	UUID        string `json:"uuid"`
	ProductName string `json:"productName,omitempty"`
	MIGProfile  string `json:"migProfile,omitempty"`
	Health      string `json:"health"`
	Message     string `json:"healthMessage,omitempty"`
}

// claimStatus writes the driver's entries of ResourceClaim status.devices
// (KEP-4817) with server-side apply: the devices of a prepared claim, none
// once it is unprepared. It works from a rate-limited queue so that prepare
// never waits for the API server and failed writes are retried with
// backoff; each write reconciles the claim against the checkpoint, so an
// out-of-date queue entry is harmless.
//
// Writes are coalesced per claim: a prepare or unprepare queues its claim
// statusDelay later, so a claim prepared and unprepared within that time is
// reconciled once, against its final state. A removal is skipped when the
// API server is known to hold no entry of this driver for the claim: the
// prepare's consistent read of the claim showed none, and no write of
// entries has been issued since (see clean). Entries of a prepared claim
// are always written.
type claimStatus struct {
	client  kubernetes.Interface
	driver  string
	manager string // field manager
	// state says which claims are prepared, with which devices.
	state   *prepare.Prepared
	devices func() map[string]resourceapi.Device
	health  func() health.Snapshot // nil: always Healthy
	queue   workqueue.TypedRateLimitingInterface[claimKey]
	delay   time.Duration
	metrics *pluginMetrics
	// forbidden: a write was refused for lack of RBAC (logged once).
	forbidden bool

	mu sync.Mutex
	// written says what the API server holds of this driver's entries per
	// claim, as far as this process knows: false, none (a consistent read
	// showed none and nothing was written since); true, maybe some (entries
	// were written, or a write was issued). A claim not in the map is
	// unknown and always written.
	written map[types.UID]bool
}

// statusDelay is how long a prepare or unprepare waits before its claim's
// status is reconciled (coalescing). A pod's containers take longer than
// this to start, so the entries of a claim in use are not visibly later.
const statusDelay = 500 * time.Millisecond

func newClaimStatus(client kubernetes.Interface, o *Options, prepared *prepare.Prepared, pub *publisher, pm *pluginMetrics) *claimStatus {
	return &claimStatus{
		client: client, driver: o.DriverName, manager: o.DriverName + "/" + o.NodeName, state: prepared,
		devices: pub.Devices,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[claimKey](100*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[claimKey]{Name: "claim_device_status"}),
		delay: statusDelay, metrics: pm, written: map[types.UID]bool{},
	}
}

// enqueue reconciles a claim now (after a restart, a health change).
func (c *claimStatus) enqueue(k claimKey) {
	if c != nil {
		c.queue.Add(k)
	}
}

// prepared queues the status of a claim the kubelet had prepared, which the
// helper has just read from the API server (a consistent read).
func (c *claimStatus) prepared(claim *resourceapi.ResourceClaim) {
	if c == nil {
		return
	}
	if !slices.ContainsFunc(claim.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool { return d.Driver == c.driver }) {
		c.mu.Lock()
		// Only for an unknown claim: a write of ours may be under way that
		// the read did not see yet.
		if _, known := c.written[claim.UID]; !known {
			c.written[claim.UID] = false
		}
		c.mu.Unlock()
	}
	c.queue.AddAfter(claimKey{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}, c.delay)
}

// unprepared queues the removal of a claim's entries.
func (c *claimStatus) unprepared(k claimKey) {
	if c != nil {
		c.queue.AddAfter(k, c.delay)
	}
}

// clean reports whether the API server is known to hold no entry of ours
// for the claim; the claim is forgotten then (a later prepare reads it again).
func (c *claimStatus) clean(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	written, known := c.written[uid]
	if known && !written {
		delete(c.written, uid)
		return true
	}
	return false
}

// markWritten records that entries of ours may be on the claim from now on;
// forget that nothing is known about it.
func (c *claimStatus) markWritten(uid types.UID) {
	c.mu.Lock()
	c.written[uid] = true
	c.mu.Unlock()
}

func (c *claimStatus) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.written, uid)
	c.mu.Unlock()
}

// enqueueHeld queues every claim prepared on this node.
func (c *claimStatus) enqueueHeld(ctx context.Context) {
	claims, err := c.state.Claims()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing prepared claims for a claim status update failed")
	}
	for _, r := range claims {
		c.enqueue(claimKey{Namespace: r.Namespace, Name: r.Name, UID: types.UID(r.UID)})
	}
}

// run works the queue until ctx is done.
func (c *claimStatus) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	logger := klog.FromContext(ctx)
	for {
		k, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(ctx, k)
		switch {
		case err == nil:
			c.queue.Forget(k)
		case apierrors.IsForbidden(err):
			// Retrying cannot help until an admin grants the permission.
			if !c.forbidden {
				logger.Error(err, "Claim device status is not written: grant update/patch on resourceclaims/status and "+
					"the resourceclaims/driver verbs for this driver (see the chart's RBAC)", "claim", klog.KRef(k.Namespace, k.Name))
			}
			c.forbidden = true
			c.queue.Forget(k)
		default:
			logger.Error(err, "Writing claim device status failed; retrying", "claim", klog.KRef(k.Namespace, k.Name))
			c.queue.AddRateLimited(k)
		}
		c.queue.Done(k)
	}
}

func (c *claimStatus) sync(ctx context.Context, k claimKey) error {
	claim, err := c.state.Claim(string(k.UID))
	if err != nil {
		return err
	}
	status := resourceac.ResourceClaimStatus()
	if claim != nil {
		devices := c.devices()
		snap := health.Snapshot{}
		if c.health != nil {
			snap = c.health()
		}
		for _, d := range claim.Devices {
			raw, err := json.Marshal(deviceData(d, devices[d.Name], snap))
			if err != nil {
				return err
			}
			entry := resourceac.AllocatedDeviceStatus().WithDriver(c.driver).WithPool(d.Pool).WithDevice(d.Name).
				WithData(runtime.RawExtension{Raw: raw})
			if d.ShareID != "" {
				entry.WithShareID(d.ShareID)
			}
			status.WithDevices(entry)
		}
	}
	start := time.Now()
	if len(status.Devices) == 0 && c.clean(k.UID) {
		c.metrics.statusWritten(statusUnchanged, start)
		return nil
	}
	if len(status.Devices) > 0 {
		c.markWritten(k.UID)
	}
	apply := resourceac.ResourceClaim(k.Name, k.Namespace).WithUID(k.UID).WithStatus(status)
	_, err = c.client.ResourceV1().ResourceClaims(k.Namespace).ApplyStatus(ctx, apply,
		metav1.ApplyOptions{FieldManager: c.manager, Force: true})
	switch {
	case err == nil:
		c.metrics.statusWritten(statusApplied, start)
		if len(status.Devices) == 0 {
			c.forget(k.UID) // none now; the map only keeps claims with entries
		}
		klog.FromContext(ctx).V(4).Info("Claim device status written", "claim", klog.KRef(k.Namespace, k.Name),
			"devices", len(status.Devices))
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		c.metrics.statusWritten(statusGone, start)
		c.forget(k.UID)
		return nil // deleted, or recreated under the same name (UID precondition)
	default:
		c.metrics.statusWritten(statusFailed, start)
		return fmt.Errorf("apply status.devices of claim %s/%s: %w", k.Namespace, k.Name, err)
	}
}

func deviceData(d prepare.PreparedDevice, dev resourceapi.Device, snap health.Snapshot) DeviceData {
	str := func(name resourceapi.QualifiedName) string {
		if v := dev.Attributes[name].StringValue; v != nil {
			return *v
		}
		return ""
	}
	gpu := health.GPUOf(dev)
	if gpu == "" {
		gpu = d.UUID
	}
	h, msg := snap.Health(gpu), snap.Message(gpu)
	if health.GPUOf(dev) != "" {
		h, msg = snap.DeviceHealth(dev), snap.DeviceMessage(dev) // MIG-scoped conditions too
	}
	out := DeviceData{UUID: d.UUID, ProductName: str("productName"), MIGProfile: str("profile"), Health: string(h)}
	if out.Health != string(health.Healthy) {
		out.Message = msg
	}
	return out
}
