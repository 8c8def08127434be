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
	"k8s.io/apimachinery/pkg/types"
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

// startInstance starts one instance of the channel plugin as the pod
// podUID of a rolling update, publishing channels channels; stop (also run
// at the test's end) stops it once.
func (e *env) startInstance(ctx context.Context, t *testing.T, cancel context.CancelCauseFunc, podUID string, channels int) (stop func()) {
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
		return e.startInstance(ctx, t, cancel, podUID, channels)
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

// draAt connects to the DRA socket of the instance with pod UID podUID.
func (e *env) draAt(t *testing.T, podUID string) drapb.DRAPluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(e.o.PluginDataDir(), "dra-"+podUID+".sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return drapb.NewDRAPluginClient(conn)
}

// prepare prepares c through dra and requires success, retrying while the
// instance's informer has not seen the domain yet.
func prepare(t *testing.T, ctx context.Context, dra drapb.DRAPluginClient, c *drapb.Claim) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{c}})
		require.NoError(t, err)
		r := resp.Claims[c.Uid]
		require.False(t, r.Error != "" && !contains(r.Error, "not found"), r.Error)
		return r.Error == "", nil
	}), "prepare %s", c.Uid)
}

func unprepare(t *testing.T, ctx context.Context, dra drapb.DRAPluginClient, c *drapb.Claim) {
	t.Helper()
	resp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{c}})
	require.NoError(t, err)
	require.Empty(t, resp.Claims[c.Uid].Error, "unprepare %s", c.Uid)
}

// TestRollingUpdateRecords runs two instances on one data dir, as a rolling
// update does. A claim the old instance prepares after the new one started
// keeps its record while the new one prepares and unprepares other claims
// (each instance writes and removes only its calls' claims' records); the
// new one reads it from the records at its unprepares, so that claim still
// holds the node in the domain; and a third instance, started afterwards,
// restores it and takes the label away at its unprepare.
func TestRollingUpdateRecords(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := newEnv(t)
	start := func(podUID string) (stop func()) {
		t.Helper()
		return e.startInstance(ctx, t, cancel, podUID, e.o.Channels)
	}
	recorded := func() []types.UID {
		t.Helper()
		claims, err := e.records().load(ctx)
		require.NoError(t, err)
		var uids []types.UID
		for _, c := range claims {
			uids = append(uids, c.UID)
		}
		return uids
	}

	stopOld := start("old-pod")
	stopNew := start("new-pod")
	oldDRA, newDRA := e.draAt(t, "old-pod"), e.draAt(t, "new-pod")
	e.setDomain(t, ctx, "", v1alpha1.DomainReady)
	channel := func(uid, device string) *drapb.Claim {
		return e.claim(t, ctx, "team", uid, uid, "channel", device, names.ChannelConfigKind)
	}
	c1, c2, c3 := channel("c1", "channel-1"), channel("c2", "channel-2"), channel("c3", "channel-3")
	d1 := e.claim(t, ctx, "gpudra", "d1", "d1", "daemon", computedomain.DaemonDeviceName, names.DaemonConfigKind)

	prepare(t, ctx, oldDRA, c1) // after the new instance read the records
	prepare(t, ctx, oldDRA, c3)
	require.Equal(t, "u1", e.label(t, ctx))
	prepare(t, ctx, newDRA, d1)
	prepare(t, ctx, newDRA, c2)
	require.Equal(t, []types.UID{"c1", "c2", "c3", "d1"}, recorded())
	unprepare(t, ctx, newDRA, c2)
	unprepare(t, ctx, newDRA, c3) // prepared through the old instance
	unprepare(t, ctx, newDRA, d1)
	require.Equal(t, []types.UID{"c1"}, recorded(), "the new instance's calls keep the old one's claim")
	require.Equal(t, "u1", e.label(t, ctx), "c1 still holds the node in the domain")

	stopOld()
	stopNew()
	p3, err := Start(ctx, e.o, e.client, e.dyn, cancel)
	require.NoError(t, err)
	defer p3.Stop()
	require.Equal(t, []computedomain.PreparedClaim{channelC1}, prepared(t, ctx, p3.Node), "a later instance restores the claim")
	unprepare(t, ctx, e.dra(t), c1)
	require.Empty(t, e.label(t, ctx), "its unprepare takes the label away")
	require.Empty(t, recorded())
	require.NoError(t, context.Cause(ctx))
}

// TestRollingOverlap runs two instances on one data dir, as a rolling
// update does, and unprepares a domain's two claims on the node through
// different instances: whichever instance unprepares the domain's last
// claim takes the node's label away, and the first unprepare leaves it to
// the claim that remains. Each instance once kept the claims in memory and
// the last unprepare, through the instance that still remembered the
// other claim, left the label in place.
func TestRollingOverlap(t *testing.T) {
	for _, tc := range []struct {
		name string
		// takenOver: the claims are prepared through the old instance
		// after the new one started, and the new one unprepares another
		// claim (c3) meanwhile (which took the recorded claims into its
		// memory); else they are prepared before the new one starts
		// (which read them into its memory).
		takenOver bool
		// firstVia unprepares c1, then lastVia unprepares c2.
		firstVia, lastVia string
	}{
		{name: "old unprepares a claim the new one restored", firstVia: "old-pod", lastVia: "new-pod"},
		{name: "new unprepares a claim it restored", firstVia: "new-pod", lastVia: "old-pod"},
		{name: "old unprepares a claim the new one took over", takenOver: true, firstVia: "old-pod", lastVia: "new-pod"},
		{name: "new unprepares a claim it took over", takenOver: true, firstVia: "new-pod", lastVia: "old-pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			e := newEnv(t)
			// A socket path has at most 108 bytes; t.TempDir's carry the
			// subtest's name.
			short, err := os.MkdirTemp("", "cd")
			require.NoError(t, err)
			t.Cleanup(func() { _ = os.RemoveAll(short) })
			e.o.KubeletPluginsDir, e.o.KubeletRegistrarDir = filepath.Join(short, "p"), filepath.Join(short, "r")
			require.NoError(t, os.Mkdir(e.o.KubeletRegistrarDir, 0o750))
			e.startInstance(ctx, t, cancel, "old-pod", e.o.Channels)
			dra := map[string]drapb.DRAPluginClient{"old-pod": e.draAt(t, "old-pod")}
			e.setDomain(t, ctx, "", v1alpha1.DomainReady)
			channel := func(uid, device string) *drapb.Claim {
				return e.claim(t, ctx, "team", uid, uid, "channel", device, names.ChannelConfigKind)
			}
			c1, c2 := channel("c1", "channel-1"), channel("c2", "channel-2")
			if !tc.takenOver {
				prepare(t, ctx, dra["old-pod"], c1)
				prepare(t, ctx, dra["old-pod"], c2)
			}
			e.startInstance(ctx, t, cancel, "new-pod", e.o.Channels)
			dra["new-pod"] = e.draAt(t, "new-pod")
			if tc.takenOver {
				c3 := channel("c3", "channel-3")
				prepare(t, ctx, dra["old-pod"], c1)
				prepare(t, ctx, dra["old-pod"], c2)
				prepare(t, ctx, dra["old-pod"], c3)
				unprepare(t, ctx, dra["new-pod"], c3)
			}
			require.Equal(t, "u1", e.label(t, ctx))

			unprepare(t, ctx, dra[tc.firstVia], c1)
			require.Equal(t, "u1", e.label(t, ctx), "c2 still holds the node in the domain")
			unprepare(t, ctx, dra[tc.lastVia], c2)
			require.Empty(t, e.label(t, ctx), "the domain's last claim on the node is gone: so is the label")
			got, err := e.records().load(ctx)
			require.NoError(t, err)
			require.Empty(t, got)
			require.NoError(t, context.Cause(ctx))
		})
	}
}
