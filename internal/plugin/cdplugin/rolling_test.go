package cdplugin

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/plugin/publishlock"
)

// countSliceWrites makes the fake API server fill in slice names from
// generateName, as the real one does, and counts slice writes.
func (e *env) countSliceWrites() *atomic.Int32 {
	var writes atomic.Int32
	e.client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		writes.Add(1)
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if s.Name == "" {
			s.Name = s.GenerateName + rand.String(5)
		}
		return false, nil, nil
	})
	for _, verb := range []string{"update", "delete"} {
		e.client.PrependReactor(verb, "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			writes.Add(1)
			return false, nil, nil
		})
	}
	return &writes
}

// TestRollingUpdateOnePublisher runs two channel plugin instances on one
// node and plugin data directory, as a DaemonSet rolling update does
// (--pod-uid). The upgrade changes what the node publishes (4 channels,
// then 2): while both run, only the old one may write the slices; the new
// one serves the kubelet meanwhile and publishes its devices once the old
// one has stopped.
func TestRollingUpdateOnePublisher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := newEnv(t)
	writes := e.countSliceWrites()
	start := func(podUID string, channels int) (stop func()) {
		t.Helper()
		o := *e.o
		o.PodUID, o.Channels = podUID, channels
		p, err := Start(ctx, &o, e.client, e.dyn, cancel)
		require.NoError(t, err)
		var once sync.Once
		stop = func() { once.Do(p.Stop) }
		t.Cleanup(stop)
		return stop
	}
	// published is the number of devices of the node's one slice (-1: not
	// exactly one slice).
	published := func() int {
		l, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return -1
		}
		return len(l.Items[0].Spec.Devices)
	}

	stopOld := start("old-pod", 4)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return published() == 5, nil // 4 channels and the daemon
	}), "the old instance publishes")
	start("new-pod", 2)

	// The slice controller's first sync takes about a second: give the new
	// instance's controller time to write if it were publishing.
	before := writes.Load()
	for deadline := time.Now().Add(2500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		require.Equal(t, 5, published(), "the new instance publishes while the old one does")
	}
	require.Equal(t, before, writes.Load(), "no slice write during the overlap")

	// The kubelet may call either instance: the new one prepares and
	// unprepares a daemon claim.
	conn, err := grpc.NewClient("unix://"+filepath.Join(e.o.PluginDataDir(), "dra-new-pod.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	dra := drapb.NewDRAPluginClient(conn)
	e.setDomain(t, ctx, "", v1alpha1.DomainNotReady)
	d1 := e.claim(t, ctx, "gpudra", "d1", "d1", "daemon", computedomain.DaemonDeviceName, names.DaemonConfigKind)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{d1}})
		require.NoError(t, err)
		r := resp.Claims[d1.Uid]
		require.False(t, r.Error != "" && !contains(r.Error, "not found"), r.Error)
		return r.Error == "", nil // the informer sees the domain shortly after it is written
	}))
	uresp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{d1}})
	require.NoError(t, err)
	require.Empty(t, uresp.Claims[d1.Uid].Error)
	require.Equal(t, 5, published(), "still the old instance's devices")

	// The old pod stops; the new instance takes over publishing.
	stopOld()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return published() == 3, nil // 2 channels and the daemon
	}), "the new instance publishes its devices after the old one stopped")
	holder, err := os.ReadFile(filepath.Join(e.o.PluginDataDir(), publishlock.FileName))
	require.NoError(t, err)
	require.Contains(t, string(holder), "pod new-pod,", "the lock file names its holder")
	require.NoError(t, context.Cause(ctx))
}
