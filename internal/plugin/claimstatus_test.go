package plugin

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
)

func TestClaimStatusSync(t *testing.T) {
	ctx := t.Context()
	store, err := checkpoint.Open(checkpoint.Options{Dir: t.TempDir(), BootID: func() (string, error) { return "boot-1", nil }})
	require.NoError(t, err)
	product := "NVIDIA H100 80GB HBM3"
	uuid := "GPU-b"
	client := fake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}})
	snap := health.Snapshot{GPUs: map[string][]health.Condition{uuid: {{Key: health.KeyXID, Value: "74",
		Effect: resourceapi.DeviceTaintEffectNoSchedule, Message: "XID 74: NVLink error", Since: time.Now()}}}}
	c := &claimStatus{client: client, driver: "gpu.gpudra.io", manager: "gpu.gpudra.io/node-a", state: prepare.NewPrepared(store),
		devices: func() map[string]resourceapi.Device {
			return map[string]resourceapi.Device{"gpu-1": {Name: "gpu-1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"uuid": {StringValue: &uuid}, "productName": {StringValue: &product}}}}
		},
		health:  func() health.Snapshot { return snap },
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[claimKey]()),
		written: map[types.UID]bool{},
	}
	defer c.queue.ShutDown()
	key := claimKey{Namespace: "ns", Name: "c1", UID: "uid-1"}
	devicesOf := func() []resourceapi.AllocatedDeviceStatus {
		claim, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c1", metav1.GetOptions{})
		require.NoError(t, err)
		return claim.Status.Devices
	}

	require.NoError(t, c.sync(ctx, key))
	require.Empty(t, devicesOf(), "not prepared: no entries")

	rec := &checkpoint.ClaimRecord{UID: "uid-1", Namespace: "ns", Name: "c1", State: checkpoint.PrepareCompleted,
		Devices: []checkpoint.Device{{Pool: "node-a", Name: "gpu-1", UUID: uuid, Requests: []string{"gpu"}}}}
	require.NoError(t, store.Put(rec))
	require.NoError(t, c.sync(ctx, key))
	got := devicesOf()
	require.Len(t, got, 1)
	require.Equal(t, "gpu.gpudra.io", got[0].Driver)
	require.Equal(t, "node-a", got[0].Pool)
	require.Equal(t, "gpu-1", got[0].Device)
	var data DeviceData
	require.NoError(t, json.Unmarshal(got[0].Data.Raw, &data))
	require.Equal(t, DeviceData{UUID: uuid, ProductName: product, Health: "Degraded", Message: "XID 74: NVLink error"}, data)

	require.NoError(t, store.Delete("uid-1"))
	require.NoError(t, c.sync(ctx, key))
	require.Empty(t, devicesOf(), "unprepared: entries removed")

	require.NoError(t, c.sync(ctx, claimKey{Namespace: "ns", Name: "gone", UID: "uid-2"}), "a deleted claim is done")

	client.PrependReactor("patch", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims/driver"}, "c1", nil)
	})
	err = c.sync(ctx, key)
	require.True(t, apierrors.IsForbidden(err), "got %v", err)
}
