package plugin

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/test/fakedriver"
)

// TestRollingUpdateOnePublisher runs two plugin instances on one node, as a
// DaemonSet rolling update does (--pod-uid, same plugin data directory).
// They see the node's health differently: the old one does not monitor it,
// the new one finds gpu-5 lost. Only the old one may write the slices while
// both run; the new one serves prepares meanwhile and publishes its view
// once the old one has stopped.
func TestRollingUpdateOnePublisher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, writes := sliceAPI(t)
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "11111111-2222-3333-4444-555555555555"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.gpudra.io", Pool: "node-a", Device: "gpu-2"}},
		}}},
	}
	_, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err)

	base := testOptions(t)
	require.NoError(t, os.MkdirAll(base.KubeletRegistrarDir, 0o750))
	instance := func(podUID string, monitor bool) (stop func()) {
		o := *base
		o.PodUID = podUID
		o.Health = HealthOptions{Enabled: monitor, IgnoredXIDs: "13", ProbeInterval: 50 * time.Millisecond, DegradedHold: time.Hour}
		ctx, cancel := context.WithCancelCause(ctx)
		p, err := Start(ctx, &o, client, cancel)
		require.NoError(t, err)
		var once sync.Once
		stop = func() { once.Do(func() { cancel(nil); p.Stop() }) }
		t.Cleanup(stop)
		return stop
	}
	gpu5Taints := func() ([]resourceapi.DeviceTaint, bool) {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return nil, false
		}
		for _, d := range l.Items[0].Spec.Devices {
			if d.Name == "gpu-5" {
				return d.Taints, true
			}
		}
		return nil, false
	}

	stopOld := instance("old-pod", false)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, ok := gpu5Taints()
		return ok, nil
	}), "the old instance publishes")
	require.NoError(t, fakedriver.WriteFaults(base.NvidiaDriverRoot, "gpu-5 lost\n"))
	instance("new-pod", true)

	// The new instance sees the fault within its first probes (50 ms);
	// give its slice controller (its first sync takes about a second) time
	// to write if it were publishing.
	published := writes.Load()
	for deadline := time.Now().Add(2500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		taints, _ := gpu5Taints()
		require.Empty(t, taints, "the slice carries the new instance's taint while the old one publishes")
	}
	require.Equal(t, published, writes.Load(), "no slice write during the overlap")

	// The kubelet may call either instance: the new one prepares.
	conn, err := grpc.NewClient("unix://"+filepath.Join(base.PluginDataDir(), "dra-new-pod.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "ns", Name: "c1", Uid: string(claim.UID)}}})
	require.NoError(t, err)
	require.Empty(t, resp.Claims[string(claim.UID)].Error)

	// The old pod stops; the new instance takes over publishing.
	stopOld()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		taints, _ := gpu5Taints()
		return len(taints) == 1 && taints[0].Key == "gpu.gpudra.io/lost" && taints[0].Effect == resourceapi.DeviceTaintEffectNoExecute, nil
	}), "the new instance publishes its view after the old one stopped")
}

// TestHealthSurvivesRestart: a plugin that restarts publishes the taints
// it had, with the times they were added: the one write is the new pool
// generation of a takeover (firstpublish.go), nothing in the devices
// changes. The fatal XID it saw is not reported again (its event is
// gone); only the saved state brings its taint back.
func TestHealthSurvivesRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, writes := sliceAPI(t)
	o := testOptions(t)
	o.Health = HealthOptions{Enabled: true, IgnoredXIDs: "13", ProbeInterval: 50 * time.Millisecond, DegradedHold: time.Hour}
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	start := func() (stop func()) {
		ctx, cancel := context.WithCancelCause(ctx)
		p, err := Start(ctx, o, client, cancel)
		require.NoError(t, err)
		var once sync.Once
		stop = func() { once.Do(func() { cancel(nil); p.Stop() }) }
		t.Cleanup(stop)
		return stop
	}
	gpu5Taints := func() []resourceapi.DeviceTaint {
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

	stop := start()
	require.NoError(t, fakedriver.WriteFaults(o.NvidiaDriverRoot, "gpu-5 xid 95\n"))
	var before []resourceapi.DeviceTaint
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		before = gpu5Taints()
		return len(before) == 2, nil // recovery-action=gpu-reset, xid=95
	}), "XID 95 taints gpu-5")
	require.Equal(t, "gpu.gpudra.io/xid", before[1].Key)
	stop()

	written := writes.Load()
	stop = start()
	sameTaints := func() {
		t.Helper()
		after := gpu5Taints()
		require.Len(t, after, len(before), "the restarted plugin publishes the same taints")
		for i := range before {
			require.Equal(t, [3]string{before[i].Key, before[i].Value, string(before[i].Effect)},
				[3]string{after[i].Key, after[i].Value, string(after[i].Effect)}, "the restarted plugin publishes the same taints")
			require.True(t, before[i].TimeAdded.Equal(after[i].TimeAdded), "taint %s keeps the time it was added: %v, now %v",
				before[i].Key, before[i].TimeAdded, after[i].TimeAdded)
		}
	}
	// Until the takeover's write and a while after it (the controller
	// syncs a second or more after start): the same taints throughout.
	begin := time.Now()
	for time.Since(begin) < 2500*time.Millisecond || writes.Load() == written {
		require.Less(t, time.Since(begin), 30*time.Second, "no takeover write within 30 s")
		sameTaints()
		time.Sleep(50 * time.Millisecond)
	}
	sameTaints()
	require.Equal(t, written+1, writes.Load(), "the restarted plugin's controller wrote the slice once, as the next pool generation")
	l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(2), l.Items[0].Spec.Pool.Generation)
	stop()
}
