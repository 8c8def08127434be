package plugin

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// rackCluster is the simulated GB200 tray's cluster UUID (its profile);
// its GPUs are in clique 1.
const rackCluster = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44"

// fabricOf is what a device's fabric attributes say: its cliqueID ("" for
// none) and fabricBandwidthDegraded ("" for none, else "true"/"false").
type fabricOf struct{ clique, degraded string }

func publishedFabric(d resourceapi.Device) fabricOf {
	var f fabricOf
	if a, ok := d.Attributes[slice.AttrCliqueID]; ok && a.StringValue != nil {
		f.clique = *a.StringValue
	}
	if a, ok := d.Attributes[slice.AttrFabricBandwidthDegraded]; ok && a.BoolValue != nil {
		f.degraded = "false"
		if *a.BoolValue {
			f.degraded = "true"
		}
	}
	return f
}

// fabricFixture is the GPU plugin on a simulated GB200 NVL72 tray (four
// GPUs in clique 1 of the rack) with a fake API server that counts the
// ResourceSlice writes.
type fabricFixture struct {
	t      *testing.T
	ctx    context.Context
	o      *Options
	client *fake.Clientset
	writes atomic.Int64
}

func newFabricFixture(t *testing.T, interval time.Duration) *fabricFixture {
	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(t)
	o.NvidiaDriverRoot = fakedriver.ForTest(t, "gb200-nvl72-tray", "node-a")
	o.FabricPollInterval = interval
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	f := &fabricFixture{t: t, ctx: ctx, o: o}
	f.newAPIServer()
	return f
}

// newAPIServer gives the fixture a new fake API server without slices.
func (f *fabricFixture) newAPIServer() {
	f.client = fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.o.NodeName, UID: "node-uid"}})
	f.client.PrependReactor("*", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if v := a.GetVerb(); v == "create" || v == "update" || v == "patch" || v == "delete" {
			f.writes.Add(1)
		}
		return false, nil, nil
	})
}

func (f *fabricFixture) fault(lines string) {
	f.t.Helper()
	require.NoError(f.t, fakedriver.WriteFaults(f.o.NvidiaDriverRoot, lines))
}

// start starts the plugin; stop ends it (also at the test's end).
func (f *fabricFixture) start() (stop func()) {
	ctx, cancel := context.WithCancelCause(f.ctx)
	p, err := Start(ctx, f.o, f.client, cancel)
	require.NoError(f.t, err)
	var done bool
	stop = func() {
		if !done {
			done = true
			cancel(nil)
			p.Stop()
		}
	}
	f.t.Cleanup(stop)
	return stop
}

// fabrics polls until the published GPUs' fabric attributes are want (by
// device name) and returns the published devices.
func (f *fabricFixture) fabrics(what string, want map[string]fabricOf) map[string]resourceapi.Device {
	f.t.Helper()
	var got map[string]fabricOf
	var devices map[string]resourceapi.Device
	err := wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		got, devices = map[string]fabricOf{}, map[string]resourceapi.Device{}
		for _, d := range l.Items[0].Spec.Devices {
			devices[d.Name] = d
			if _, ok := want[d.Name]; ok {
				got[d.Name] = publishedFabric(d)
			}
		}
		return equalFabrics(got, want), nil
	})
	require.NoError(f.t, err, "%s: published %v, want %v", what, got, want)
	return devices
}

// devices waits for the published devices and returns them by name.
func (f *fabricFixture) devices() map[string]resourceapi.Device {
	f.t.Helper()
	devices := map[string]resourceapi.Device{}
	require.NoError(f.t, wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		for _, d := range l.Items[0].Spec.Devices {
			devices[d.Name] = d
		}
		return true, nil
	}))
	return devices
}

func equalFabrics(a, b map[string]fabricOf) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// tray is the four GPUs' attributes: clique 1, bandwidth not degraded,
// but for the GPUs given.
func tray(changes map[string]fabricOf) map[string]fabricOf {
	out := map[string]fabricOf{}
	for _, g := range []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"} {
		out[g] = fabricOf{clique: rackCluster + ".1", degraded: "false"}
		if c, ok := changes[g]; ok {
			out[g] = c
		}
	}
	return out
}

// TestFabricPoll: the GPU plugin of a GB200 tray reads its GPUs' NVLink
// fabric again while it runs (the simulator's fault file changes what NVML
// answers) and publishes the changed cliqueID and fabricBandwidthDegraded
// attributes; the devices are then those a fresh start publishes for the
// same answers. While nothing changes, nothing is written. With the poll
// off the fabric is read once.
func TestFabricPoll(t *testing.T) {
	const interval = 50 * time.Millisecond
	for _, tc := range []struct {
		name            string
		interval        time.Duration
		atStart, change string
		before, after   map[string]fabricOf
	}{
		{name: "registration completes later", interval: interval,
			atStart: "gpu-0 fabric in-progress\n", change: "",
			before: tray(map[string]fabricOf{"gpu-0": {degraded: "false"}}), after: tray(nil)},
		{name: "registration starts over", interval: interval,
			atStart: "", change: "gpu-1 fabric not-started\ngpu-2 fabric completed TIMEOUT\n",
			before: tray(nil), after: tray(map[string]fabricOf{"gpu-1": {degraded: "false"}, "gpu-2": {degraded: "false"}})},
		{name: "bandwidth degraded", interval: interval,
			atStart: "", change: "gpu-1 fabric-health degraded-bandwidth route-recovery\n",
			before: tray(nil), after: tray(map[string]fabricOf{"gpu-1": {clique: rackCluster + ".1", degraded: "true"}})},
		{name: "bandwidth restored", interval: interval,
			atStart: "gpu-3 fabric-health degraded-bandwidth\n", change: "",
			before: tray(map[string]fabricOf{"gpu-3": {clique: rackCluster + ".1", degraded: "true"}}), after: tray(nil)},
		{name: "clique changes", interval: interval,
			atStart: "", change: "gpu-0 fabric-clique 4\ngpu-1 fabric-clique 4\ngpu-2 fabric-clique 4\ngpu-3 fabric-clique 4\n",
			before: tray(nil), after: tray(map[string]fabricOf{"gpu-0": {rackCluster + ".4", "false"}, "gpu-1": {rackCluster + ".4", "false"},
				"gpu-2": {rackCluster + ".4", "false"}, "gpu-3": {rackCluster + ".4", "false"}})},
		{name: "no attribute changes", interval: interval, // in-progress to not-started: neither publishes a clique
			atStart: "gpu-0 fabric in-progress\n", change: "gpu-0 fabric not-started\ngpu-1 fabric-health none\n",
			before: tray(map[string]fabricOf{"gpu-0": {degraded: "false"}}), after: tray(map[string]fabricOf{"gpu-0": {degraded: "false"}})},
		{name: "poll off", interval: 0,
			atStart: "gpu-0 fabric in-progress\n", change: "gpu-1 fabric-health degraded-bandwidth\n",
			before: tray(map[string]fabricOf{"gpu-0": {degraded: "false"}}), after: tray(map[string]fabricOf{"gpu-0": {degraded: "false"}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFabricFixture(t, tc.interval)
			f.fault(tc.atStart)
			stop := f.start()
			f.fabrics("at start", tc.before)
			// Settled: polls that find nothing new write nothing.
			time.Sleep(10 * interval)
			settled := f.writes.Load()
			time.Sleep(10 * interval)
			require.Equal(t, settled, f.writes.Load(), "ResourceSlice writes while the fabric did not change")

			f.fault(tc.change)
			f.fabrics("after the change", tc.after)
			time.Sleep(10 * interval) // at least 100 ms for the simulator's fault poll, several polls
			polled := f.fabrics("after the change, settled", tc.after)
			changed := !equalFabrics(tc.before, tc.after)
			if !changed {
				require.Equal(t, settled, f.writes.Load(), "no attribute changed: nothing written")
			} else {
				require.Greater(t, f.writes.Load(), settled, "the change was written")
				settled = f.writes.Load()
				time.Sleep(10 * interval)
				require.Equal(t, settled, f.writes.Load(), "written once, then nothing while nothing changes")
			}

			// A fresh start on the same NVML answers publishes the same
			// devices.
			stop()
			f.newAPIServer()
			f.start()
			fresh := f.devices()
			if tc.interval > 0 {
				require.Equal(t, fresh, polled, "the polled devices are those of a fresh start")
			} else {
				require.NotEqual(t, fresh, polled, "a fresh start reads what the running plugin did not")
			}
		})
	}
}

// TestFabricPollOnlyOnFabricNodes: a node whose GPUs have no multi-node
// NVLink fabric (a DGX H100 answers NOT_SUPPORTED) never reads it again;
// a GB200 tray does unless the poll is off; a negative interval is refused.
func TestFabricPollOnlyOnFabricNodes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, tc := range []struct {
		profile  string
		interval time.Duration
		polled   int
	}{
		{profile: "dgx-h100", interval: time.Second},
		{profile: "gb200-nvl72-tray", interval: time.Second, polled: 4},
		{profile: "gb200-nvl72-tray"},
	} {
		o := testOptions(t)
		o.NvidiaDriverRoot = fakedriver.ForTest(t, tc.profile, "node-a")
		o.FabricPollInterval = tc.interval
		require.NoError(t, o.Validate())
		gpus, err := OpenNode(ctx, o)
		require.NoError(t, err)
		fp := newFabricPoller(o, gpus, &publisher{})
		if tc.polled == 0 {
			require.Nil(t, fp, "%s every %s", tc.profile, tc.interval)
		} else {
			require.NotNil(t, fp, tc.profile)
			require.Len(t, fp.polled, tc.polled)
		}
		gpus.Close()
	}
	o := testOptions(t)
	o.FabricPollInterval = -time.Second
	require.ErrorContains(t, o.Validate(), "--fabric-poll-interval=-1s: must be 0 (read the fabric once) or above")
}
