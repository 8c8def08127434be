package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/test/fakedriver"
)

// TestHealthPath starts the plugin in simulation with health monitoring,
// prepares a claim on gpu-5, breaks gpu-5 through the fault file and checks
// what the cluster and the kubelet get: the taint in the slice, the
// Unhealthy report on the health stream, the claim's status.devices, an
// event; then repairs it.
func TestHealthPath(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	o := testOptions(t)
	o.Health = HealthOptions{Enabled: true, IgnoredXIDs: "13", ProbeInterval: 100 * time.Millisecond, DegradedHold: time.Minute}
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "11111111-2222-3333-4444-555555555555"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: o.DriverName, Pool: o.NodeName, Device: "gpu-5"}},
		}}},
	}
	_, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err)
	p, err := Start(ctx, o, client, cancel)
	require.NoError(t, err)
	defer p.Stop()

	conn, err := grpc.NewClient("unix://"+filepath.Join(o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "ns", Name: "c1", Uid: string(claim.UID)}}})
	require.NoError(t, err)
	require.Empty(t, resp.Claims[string(claim.UID)].Error)
	statusData := func() map[string]string {
		c, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c1", metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) != 1 {
			return nil
		}
		var m map[string]string
		_ = json.Unmarshal(c.Status.Devices[0].Data.Raw, &m)
		return m
	}
	poll := func(what string, ok func() bool) {
		t.Helper()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return ok(), nil }), what)
	}
	poll("status.devices written after prepare", func() bool { return statusData()["health"] == "Healthy" })

	stream, err := drahealth.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	require.NoError(t, err)
	healthOf := func(device string) drahealth.HealthStatus {
		t.Helper()
		r, err := stream.Recv()
		require.NoError(t, err)
		require.Len(t, r.Devices, 8, "every device in each report")
		for _, d := range r.Devices {
			if d.Device.DeviceName == device {
				return d.Health
			}
		}
		t.Fatalf("no report for %s", device)
		return 0
	}
	require.Equal(t, drahealth.HealthStatus_HEALTHY, healthOf("gpu-5"))

	taints := func() []resourceapi.DeviceTaint {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return nil
		}
		for _, d := range l.Items[0].Spec.Devices {
			if d.Name == "gpu-5" {
				return d.Taints
			}
		}
		return nil
	}
	// The API server refuses the first slice writes: the taint must still
	// arrive (the helper's slice controller retries with backoff). The fake
	// client names no slices, so the controller replaces rather than updates.
	var refused atomic.Int32
	refuse := func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused.Add(1) <= 3 {
			return true, nil, errors.New("injected: etcd is having a bad day")
		}
		return false, nil, nil
	}
	client.PrependReactor("create", "resourceslices", refuse)
	client.PrependReactor("update", "resourceslices", refuse)
	require.NoError(t, fakedriver.WriteFaults(o.NvidiaDriverRoot, "gpu-5 xid 79\n"))
	poll("NoExecute taint on gpu-5", func() bool {
		ts := taints()
		return len(ts) > 0 && ts[len(ts)-1].Key == "gpu.gpudra.io/xid" && ts[len(ts)-1].Effect == resourceapi.DeviceTaintEffectNoExecute
	})
	require.Greater(t, refused.Load(), int32(3), "the refused updates were retried")
	awaitHealth := func(want drahealth.HealthStatus) {
		t.Helper()
		for i := 0; healthOf("gpu-5") != want; i++ { // reports until the one with the change
			require.Less(t, i, 20, "no %v report for gpu-5", want)
		}
	}
	awaitHealth(drahealth.HealthStatus_UNHEALTHY)
	poll("status.devices shows the health", func() bool { return statusData()["health"] == "Unhealthy" })
	poll("an event on the claim", func() bool {
		evs, err := client.EventsV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == ReasonDeviceUnhealthy && e.Regarding.Name == "c1" {
				return true
			}
		}
		return false
	})

	require.NoError(t, fakedriver.WriteFaults(o.NvidiaDriverRoot, ""))
	poll("taint removed after the repair", func() bool { return len(taints()) == 0 })
	awaitHealth(drahealth.HealthStatus_HEALTHY)

	_, err = drapb.NewDRAPluginClient(conn).NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "ns", Name: "c1", Uid: string(claim.UID)}}})
	require.NoError(t, err)
	poll("status.devices removed after unprepare", func() bool {
		c, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c1", metav1.GetOptions{})
		return err == nil && len(c.Status.Devices) == 0
	})
	require.NoError(t, context.Cause(ctx))
}
