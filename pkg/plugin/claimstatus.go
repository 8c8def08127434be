package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

	"github.com/gpudra/gpudra/pkg/checkpoint"
	"github.com/gpudra/gpudra/pkg/health"
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
type claimStatus struct {
	client  kubernetes.Interface
	driver  string
	manager string // field manager
	store   *checkpoint.Store
	devices func() map[string]resourceapi.Device
	health  func() health.Snapshot // nil: always Healthy
	queue   workqueue.TypedRateLimitingInterface[claimKey]
	// forbidden: a write was refused for lack of RBAC (logged once).
	forbidden bool
}

func newClaimStatus(client kubernetes.Interface, o *Options, store *checkpoint.Store, pub *publisher) *claimStatus {
	return &claimStatus{
		client: client, driver: o.DriverName, manager: o.DriverName + "/" + o.NodeName, store: store,
		devices: pub.Devices,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[claimKey](100*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[claimKey]{Name: "claim_device_status"}),
	}
}

func (c *claimStatus) enqueue(k claimKey) {
	if c != nil {
		c.queue.Add(k)
	}
}

// enqueueHeld queues every claim prepared on this node.
func (c *claimStatus) enqueueHeld(ctx context.Context) {
	held, err := c.store.HeldDevices()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing prepared claims for a claim status update failed")
		return
	}
	seen := map[string]bool{}
	for device := range held {
		holders, err := c.store.Holders(device)
		if err != nil {
			continue
		}
		for _, h := range holders {
			ns, name, ok := strings.Cut(h.Claim, "/")
			if ok && !seen[h.ClaimUID] {
				seen[h.ClaimUID] = true
				c.enqueue(claimKey{Namespace: ns, Name: name, UID: types.UID(h.ClaimUID)})
			}
		}
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
	rec, err := c.store.Get(string(k.UID))
	if err != nil {
		return err
	}
	status := resourceac.ResourceClaimStatus()
	if rec != nil && rec.State == checkpoint.PrepareCompleted {
		devices := c.devices()
		snap := health.Snapshot{}
		if c.health != nil {
			snap = c.health()
		}
		for _, d := range rec.Devices {
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
	claim := resourceac.ResourceClaim(k.Name, k.Namespace).WithUID(k.UID).WithStatus(status)
	_, err = c.client.ResourceV1().ResourceClaims(k.Namespace).ApplyStatus(ctx, claim,
		metav1.ApplyOptions{FieldManager: c.manager, Force: true})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(4).Info("Claim device status written", "claim", klog.KRef(k.Namespace, k.Name),
			"devices", len(status.Devices))
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // deleted, or recreated under the same name (UID precondition)
	default:
		return fmt.Errorf("apply status.devices of claim %s/%s: %w", k.Namespace, k.Name, err)
	}
}

func deviceData(d checkpoint.Device, dev resourceapi.Device, snap health.Snapshot) DeviceData {
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
	out := DeviceData{UUID: d.UUID, ProductName: str("productName"), MIGProfile: str("profile"), Health: string(snap.Health(gpu))}
	if out.Health != string(health.Healthy) {
		out.Message = snap.Message(gpu)
	}
	return out
}
