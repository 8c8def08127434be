package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/inventory"
	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/sim"
)

// fault writes the simulated node's fault file (see
// test/sim/faultfile.go). The simulated libnvidia-ml applies it at
// nvmlInit and while it runs: "gpu-3 xid 79" is a GPU that fell off the
// bus and answers nothing, across plugin restarts, until the line goes.
func (f *lostFixture) fault(lines string) {
	f.t.Helper()
	require.NoError(f.t, fakedriver.WriteFaults(f.o.NvidiaDriverRoot, lines))
}

// lostFixture is a plugin on a fake driver root of a simulated dgx-h100
// with a fake API server.
type lostFixture struct {
	t      *testing.T
	ctx    context.Context
	o      *Options
	client *fake.Clientset
}

func newLostFixture(t *testing.T, healthOn bool) *lostFixture {
	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(t)
	o.Health = HealthOptions{Enabled: healthOn, ProbeInterval: 50 * time.Millisecond, DegradedHold: time.Minute}
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	f := &lostFixture{t: t, ctx: ctx, o: o,
		client: fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})}
	for _, c := range []struct{ name, device string }{{"c0", "gpu-0"}, {"c3", "gpu-3"}, {"c3b", "gpu-3"}} {
		_, err := f.client.ResourceV1().ResourceClaims("ns").Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: c.name, UID: types.UID("uid-" + c.name)},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: o.DriverName, Pool: o.NodeName, Device: c.device}},
			}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return f
}

// start starts the plugin until the test (or stop) ends it.
func (f *lostFixture) start() (stop func()) {
	ctx, cancel := context.WithCancelCause(f.ctx)
	p, err := Start(ctx, f.o, f.client, cancel)
	require.NoError(f.t, err, "one lost GPU must not stop the plugin")
	var once bool
	stop = func() {
		if !once {
			once = true
			// Plugin.Stop shuts NVML down without waiting for the health
			// monitor: end it first, and give a running probe time to finish.
			cancel(nil)
			if f.o.Health.Enabled {
				time.Sleep(4 * f.o.Health.ProbeInterval)
			}
			p.Stop()
		}
	}
	f.t.Cleanup(stop)
	return stop
}

// devices polls until the published pool satisfies ok and returns it by name.
func (f *lostFixture) devices(what string, ok func(map[string]resourceapi.Device) bool) map[string]resourceapi.Device {
	f.t.Helper()
	var got map[string]resourceapi.Device
	err := wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		got = map[string]resourceapi.Device{}
		for _, d := range l.Items[0].Spec.Devices {
			got[d.Name] = d
		}
		return ok(got), nil
	})
	require.NoError(f.t, err, "%s; last published: %v", what, got)
	return got
}

func (f *lostFixture) prepare(claim string) string {
	f.t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(f.o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(f.t, err)
	defer conn.Close()
	resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(f.ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "ns", Name: claim, Uid: "uid-" + claim}}})
	require.NoError(f.t, err)
	return resp.Claims["uid-"+claim].Error
}

func (f *lostFixture) unprepare(claim string) string {
	f.t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(f.o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(f.t, err)
	defer conn.Close()
	resp, err := drapb.NewDRAPluginClient(conn).NodeUnprepareResources(f.ctx, &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "ns", Name: claim, Uid: "uid-" + claim}}})
	require.NoError(f.t, err)
	return resp.Claims["uid-"+claim].Error
}

func lostTaint(d resourceapi.Device) bool {
	return len(d.Taints) == 1 && d.Taints[0].Key == "gpu.gpudra.io/lost" && d.Taints[0].Value == "gpu-is-lost" &&
		d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoExecute
}

// Issue 13: gpu-3 falls off the bus under a running pod and the plugin
// restarts. It must start, publish gpu-3 from its last known identity
// tainted NoExecute (the pod is evicted, the scheduler avoids it) and the
// other GPUs untainted, prepare claims on those, unprepare the evicted
// claim; with monitoring on, the taint goes once gpu-3 answers again.
func TestLostGPUAfterRestart(t *testing.T) {
	for _, healthOn := range []bool{true, false} {
		t.Run(map[bool]string{true: "health monitoring", false: "no health monitoring"}[healthOn], func(t *testing.T) {
			f := newLostFixture(t, healthOn)
			f.o.Health.Enabled = false // the first run only records the GPUs and prepares c3
			stop := f.start()
			first := f.devices("first start publishes 8 GPUs", func(m map[string]resourceapi.Device) bool { return len(m) == 8 })
			require.Empty(t, f.prepare("c3"), "a pod runs on gpu-3")
			stop()
			f.o.Health.Enabled = healthOn

			f.fault("gpu-3 xid 79\n")
			f.start()
			got := f.devices("gpu-3 published tainted, the others not", func(m map[string]resourceapi.Device) bool {
				return len(m) == 8 && lostTaint(m["gpu-3"])
			})
			require.Equal(t, first["gpu-3"].Attributes, got["gpu-3"].Attributes, "gpu-3 keeps its last known identity")
			for name, d := range got {
				if name != "gpu-3" {
					require.Empty(t, d.Taints, name)
				}
			}
			require.Empty(t, f.prepare("c0"), "claims on the healthy GPUs are prepared")
			require.Empty(t, f.unprepare("c3"), "the evicted pod's claim is unprepared")
			require.Contains(t, f.prepare("c3b"), "did not answer NVML", "a new claim on the lost GPU is refused")
			known, err := inventory.New(f.o.PluginDataDir(), f.o.NodeName).Load()
			require.NoError(t, err)
			require.Len(t, known, 8, "gpu-3 stays known while it is lost")
			f.event(ReasonGPUUnavailable, "published as gpu-3")

			if !healthOn {
				return
			}
			f.fault("") // the reset: the same GPU answers again
			f.devices("taint removed once gpu-3 answers again", func(m map[string]resourceapi.Device) bool {
				return len(m) == 8 && len(m["gpu-3"].Taints) == 0
			})
		})
	}
}

// A GPU that fails every query on a node the plugin never saw (fresh data
// directory) is withheld: the plugin starts and publishes the others.
func TestLostGPUNeverSeen(t *testing.T) {
	f := newLostFixture(t, true)
	f.fault("gpu-3 lost\n")
	f.start()
	got := f.devices("the 7 GPUs that answer", func(m map[string]resourceapi.Device) bool { return len(m) == 7 })
	require.NotContains(t, got, "gpu-3")
	for name, d := range got {
		require.Empty(t, d.Taints, name)
	}
	require.Empty(t, f.prepare("c0"))
	known, err := inventory.New(f.o.PluginDataDir(), f.o.NodeName).Load()
	require.NoError(t, err)
	require.Len(t, known, 7)
	f.event(ReasonGPUUnavailable, "not published: no GPU was known at NVML index 3")
}

// event polls for a node event with reason whose note contains note.
func (f *lostFixture) event(reason, note string) {
	f.t.Helper()
	var notes []string
	err := wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		notes = notes[:0]
		for _, e := range l.Items {
			notes = append(notes, e.Reason+": "+e.Note)
			if e.Reason == reason && e.Regarding.Kind == "Node" && strings.Contains(e.Note, note) {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(f.t, err, "no %s event with %q; events: %q", reason, note, notes)
}

// inspect lists a GPU that does not answer and writes nothing.
func TestInspectLostGPU(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newLostFixture(t, false)
	f.fault("gpu-3 xid 79\n")
	o := f.o
	ins, err := Inspect(ctx, o)
	require.NoError(t, err)
	require.Len(t, ins.Node.GPUs, 7)
	require.Len(t, ins.Node.Unavailable, 1)
	require.Equal(t, 3, ins.Node.Unavailable[0].Index)
	require.Equal(t, "gpu-is-lost", ins.Node.Unavailable[0].Reason)
	require.NoFileExists(t, filepath.Join(o.PluginDataDir(), inventory.FileName))
}

// A GPU that NVML gives no handle of when the health monitor is set up (lost
// since discovery) is monitored as lost: never fatal.
func TestHealthServiceGPUWithoutHandle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p, err := sim.Load("dgx-h100", nil)
	require.NoError(t, err)
	srv := sim.NewServer(p, "node-a")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	node, err := discovery.Discover(ctx, srv, discovery.Options{})
	require.NoError(t, err)
	require.NoError(t, srv.InjectXID(node.GPUs[3].UUID, 79))

	o := &Options{Health: HealthOptions{Enabled: true, ProbeInterval: time.Hour, DegradedHold: time.Minute}}
	hs, err := newHealthService(ctx, o, &GPUNode{Lib: srv, Node: node}, &publisher{}, nil)
	require.NoError(t, err, "a lost GPU must not stop the plugin")
	snap := hs.mon.Snapshot()
	require.Equal(t, health.Unhealthy, snap.Health(node.GPUs[3].UUID))
	require.Equal(t, "NVML cannot reach the GPU (gpu-is-lost)", snap.Message(node.GPUs[3].UUID))
	require.Equal(t, health.Healthy, snap.Health(node.GPUs[2].UUID))

	require.NoError(t, srv.Reset(node.GPUs[3].UUID))
	hs.mon.ProbeAll(ctx)
	require.Equal(t, health.Healthy, hs.mon.Snapshot().Health(node.GPUs[3].UUID), "found again once it answers")
}
