package cdplugin

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// trayClique is the clique of the simulated GB200 tray (its profile).
const trayClique = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44.1"

// fabricLines are fault-file lines setting the fabric state of the tray's
// four GPUs ("" leaves a GPU as its profile says: completed, clique 1).
func fabricLines(states ...string) string {
	var b strings.Builder
	for i, st := range states {
		if st != "" {
			b.WriteString("gpu-" + string(rune('0'+i)) + " fabric " + st + "\n")
		}
	}
	return b.String()
}

// TestFabricRegistration starts the channel plugin on a simulated GB200
// tray whose NVLink fabric registration is set through the simulator's
// fault file: a node whose registration has not completed publishes
// nothing (and /readyz says why) until it completes, then publishes with
// the clique; a registration that completed with an error stops the start;
// a fabric NVML does not support publishes without a clique.
func TestFabricRegistration(t *testing.T) {
	for _, tc := range []struct {
		name string
		// the fault file at start, then at each step until the last one,
		// which leaves no GPU pending
		steps []string
		// what /readyz says at each step but the last one
		reasons [][]string
		wantErr []string
		clique  string
	}{
		// Short names: the test's directory holds a unix socket.
		{name: "in-progress", // at start, completes later
			steps:   []string{fabricLines("in-progress", "in-progress", "in-progress", "in-progress"), fabricLines("", "not-started"), ""},
			reasons: [][]string{{"(gpu-0 GPU-", ": in-progress; gpu-1 GPU-", "; gpu-3 GPU-"}, {"(gpu-1 GPU-", ": not-started)"}},
			clique:  trayClique},
		{name: "not-started", // on one GPU
			steps:   []string{fabricLines("", "", "", "not-started"), ""},
			reasons: [][]string{{"(gpu-3 GPU-", ": not-started)"}}, clique: trayClique},
		{name: "error-status", // completed with an error status
			steps:   []string{fabricLines("", "completed TIMEOUT")},
			wantErr: []string{"NVLink fabric registration failed (gpu-1 GPU-", "check the NVIDIA Fabric Manager (the nvidia-fabricmanager service"}},
		{name: "then-error", // in progress, then an error status
			steps:   []string{fabricLines("in-progress"), fabricLines("completed UNKNOWN")},
			reasons: [][]string{{"(gpu-0 GPU-", ": in-progress)"}},
			wantErr: []string{"NVLink fabric registration failed (gpu-0 GPU-"}},
		{name: "not-supported", // no clique, at once
			steps: []string{fabricLines("not-supported", "not-supported", "not-supported", "not-supported")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			e := newEnv(t)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			e.o.healthListener = l
			require.NoError(t, fakedriver.WriteFaults(e.o.NvidiaDriverRoot, tc.steps[0]))

			type started struct {
				p   *Plugin
				err error
			}
			done := make(chan started, 1)
			go func() {
				p, err := Start(ctx, e.o, e.client, e.dyn, cancel)
				done <- started{p, err}
			}()
			readyz := "http://" + l.Addr().String() + "/readyz"
			for i, step := range tc.steps {
				if i > 0 {
					require.NoError(t, fakedriver.WriteFaults(e.o.NvidiaDriverRoot, step))
				}
				if i == len(tc.steps)-1 {
					break
				}
				// Pending: /readyz names the GPUs waited for; nothing is
				// published while the plugin reads NVML again and again.
				reason := func(body string) bool {
					for _, r := range tc.reasons[i] {
						if !strings.Contains(body, r) {
							return false
						}
					}
					return strings.Contains(body, "nvlink-fabric: not publishing IMEX channels until the registration completes")
				}
				require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					_, body := get(t, readyz)
					return reason(body), nil
				}), "step %d: /readyz gives the reason", i)
				time.Sleep(10 * e.o.FabricRetryInterval)
				code, body := get(t, readyz)
				require.Equal(t, 500, code)
				require.True(t, reason(body), body)
				require.Empty(t, e.slices(t, ctx), "nothing is published while the registration is pending")
				select {
				case s := <-done:
					t.Fatalf("Start returned while the registration is pending: %v", s.err)
				default:
				}
			}
			var s started
			select {
			case s = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not return once the registration completed")
			}
			if tc.wantErr != nil {
				require.Error(t, s.err)
				for _, w := range tc.wantErr {
					require.ErrorContains(t, s.err, w)
				}
				require.Empty(t, e.slices(t, ctx), "a failed registration publishes nothing")
				return
			}
			require.NoError(t, s.err)
			defer s.p.Stop()
			require.Equal(t, tc.clique, s.p.CliqueID)
			require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				return len(e.slices(t, ctx)) == 1, nil
			}))
			devices := e.slices(t, ctx)[0].Spec.Devices
			require.Len(t, devices, 5)
			for _, d := range devices {
				got := d.Attributes[slice.AttrCliqueID].StringValue
				if tc.clique == "" {
					require.Nil(t, got, d.Name)
					continue
				}
				require.NotNil(t, got, d.Name)
				require.Equal(t, tc.clique, *got, d.Name)
			}
			_, body := get(t, readyz)
			require.Contains(t, body, "kubelet-registration", "no longer waiting for the fabric")
		})
	}
}

// slices lists the published ResourceSlices.
func (e *env) slices(t *testing.T, ctx context.Context) []resourceapi.ResourceSlice {
	t.Helper()
	l, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	return l.Items
}

// A plugin stopped while it waits for the fabric registration returns the
// stop as its cause (Run then exits without an error) and serves nothing
// more.
func TestFabricWaitStopped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e.o.healthListener = l
	require.NoError(t, fakedriver.WriteFaults(e.o.NvidiaDriverRoot, fabricLines("in-progress")))
	done := make(chan error, 1)
	go func() {
		_, err := Start(ctx, e.o, e.client, e.dyn, cancel)
		done <- err
	}()
	readyz := "http://" + l.Addr().String() + "/readyz"
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, body := get(t, readyz)
		return strings.Contains(body, "nvlink-fabric:"), nil
	}))
	cancel(context.Canceled)
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "stopped while waiting for the NVLink fabric registration")
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return once stopped")
	}
	_, err = http.Get(readyz)
	require.Error(t, err, "the health endpoint is closed")
	require.Empty(t, e.slices(t, context.Background()))
}

// fabricStep is the fault file at one step of TestFabricWatch and what the
// running plugin then publishes and answers.
type fabricStep struct {
	faults string
	// channels published (the daemon device is always published) and the
	// clique every device carries.
	channels int
	clique   string
	// readyz: what /readyz says ("" means no fabric problem: the kubelet
	// registration is what it reports).
	readyz []string
}

// TestFabricWatch: the running channel plugin of a GB200 tray reads the
// NVLink fabric again every --fabric-retry-interval. A registration that
// starts over or fails, or GPUs split over two cliques, withdraw the
// channels (the daemon device stays, with the last clique) and fail
// /readyz with the GPUs and what to check, while a claim prepared before
// keeps its CDI spec and is unprepared; a valid clique again publishes the
// channels again; a new clique is published and is the one claims are
// prepared by.
func TestFabricWatch(t *testing.T) {
	all := func(line string) string {
		return "gpu-0 " + line + "\ngpu-1 " + line + "\ngpu-2 " + line + "\ngpu-3 " + line + "\n"
	}
	const newClique = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44.2"
	ok := fabricStep{channels: 4, clique: trayClique}
	for _, tc := range []struct {
		name  string
		steps []fabricStep
		// unprepare: a channel claim is prepared before the second step
		// and unprepared at it.
		unprepare bool
	}{
		{name: "starts-over", unprepare: true, steps: []fabricStep{ok,
			{faults: fabricLines("", "in-progress"), clique: trayClique, readyz: []string{
				"nvlink-fabric: the NVLink fabric registration of the node's GPUs started over: not publishing IMEX channels until it completes",
				"(gpu-1 GPU-", ": in-progress)", "check the NVIDIA Fabric Manager (nvidia-fabricmanager)"}},
			{faults: fabricLines("not-started", "in-progress"), clique: trayClique, readyz: []string{"(gpu-0 GPU-", ": not-started; gpu-1 GPU-"}},
			ok}},
		{name: "fails", unprepare: true, steps: []fabricStep{ok,
			{faults: fabricLines("", "", "completed TIMEOUT"), clique: trayClique, readyz: []string{
				"nvlink-fabric: the NVLink fabric of the node's GPUs is no longer usable: not publishing IMEX channels: NVLink fabric registration failed (gpu-2 GPU-",
				"check the NVIDIA Fabric Manager (the nvidia-fabricmanager service"}},
			ok}},
		{name: "clique", steps: []fabricStep{ok,
			{faults: all("fabric-clique 2"), channels: 4, clique: newClique},
			{faults: all("fabric-clique 2") + "gpu-3 fabric in-progress\n", clique: newClique, readyz: []string{"(gpu-3 GPU-", ": in-progress)"}},
			{faults: all("fabric-clique 2"), channels: 4, clique: newClique},
			ok}},
		{name: "split", steps: []fabricStep{ok,
			{faults: "gpu-0 fabric-clique 2\n", clique: trayClique, readyz: []string{"the node's GPUs are in 2 NVLink cliques", newClique}},
			ok}},
		{name: "health", steps: []fabricStep{ok, // degraded bandwidth is the GPU plugin's attribute: the channels stay
			{faults: all("fabric-health degraded-bandwidth"), channels: 4, clique: trayClique}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			e := newEnv(t)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			e.o.healthListener = l
			require.NoError(t, fakedriver.WriteFaults(e.o.NvidiaDriverRoot, tc.steps[0].faults))
			p := e.start(t, ctx, cancel)
			defer p.Stop()
			readyz := "http://" + l.Addr().String() + "/readyz"
			var c1 *drapb.Claim
			for i, step := range tc.steps {
				if i > 0 {
					require.NoError(t, fakedriver.WriteFaults(e.o.NvidiaDriverRoot, step.faults))
				}
				e.waitDevices(t, ctx, i, step)
				reason := func(body string) bool {
					if len(step.readyz) == 0 {
						return strings.Contains(body, "kubelet-registration") && !strings.Contains(body, "nvlink-fabric")
					}
					for _, r := range step.readyz {
						if !strings.Contains(body, r) {
							return false
						}
					}
					return true
				}
				var body string
				require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					_, body = get(t, readyz)
					return reason(body), nil
				}), "step %d: /readyz says %q", i, body)
				// Settled: several reads of the fabric change nothing.
				time.Sleep(5 * e.o.FabricRetryInterval)
				e.waitDevices(t, ctx, i, step)
				code, body := get(t, readyz)
				require.Equal(t, http.StatusInternalServerError, code)
				require.True(t, reason(body), body)
				if step.clique != "" && step.readyz == nil {
					require.Equal(t, step.clique, p.Node.CliqueID(), "claims are prepared by the published clique")
				}

				switch {
				case tc.unprepare && i == 0:
					e.setDomain(t, ctx, p.CliqueID, v1alpha1.DomainReady)
					c1 = e.claim(t, ctx, "team", "c1", "c1", "channel", "channel-1", names.ChannelConfigKind)
					dra := e.dra(t)
					require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
						resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{c1}})
						require.NoError(t, err)
						return resp.Claims[c1.Uid].Error == "", nil
					}))
				case tc.unprepare && i == 1:
					require.NotNil(t, e.spec(t, "c1"), "a prepared claim keeps its CDI spec while the channels are withdrawn")
					resp, err := e.dra(t).NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{c1}})
					require.NoError(t, err)
					require.Empty(t, resp.Claims["c1"].Error, "unprepare is served while the channels are withdrawn")
					require.Empty(t, prepared(t, ctx, p.Node))
					require.Empty(t, e.label(t, ctx))
				}
			}
			require.NoError(t, context.Cause(ctx))
		})
	}
}

// waitDevices waits until the one published slice has step's channels and
// the daemon device, each with step's clique.
func (e *env) waitDevices(t *testing.T, ctx context.Context, i int, step fabricStep) {
	t.Helper()
	var last []string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		slices := e.slices(t, ctx)
		if len(slices) != 1 {
			return false, nil
		}
		last = nil
		channels, daemon := 0, false
		for _, d := range slices[0].Spec.Devices {
			clique := ""
			if a := d.Attributes[slice.AttrCliqueID].StringValue; a != nil {
				clique = *a
			}
			last = append(last, d.Name+"@"+clique)
			if clique != step.clique {
				return false, nil
			}
			if d.Name == computedomain.DaemonDeviceName {
				daemon = true
			} else {
				channels++
			}
		}
		return daemon && channels == step.channels, nil
	}), "step %d: want %d channels and the daemon in clique %q, published %v", i, step.channels, step.clique, last)
}
