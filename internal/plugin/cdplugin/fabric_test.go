package cdplugin

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

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
			faults := filepath.Join(e.o.NvidiaDriverRoot, fakedriver.FaultFile)
			require.NoError(t, os.WriteFile(faults, []byte(tc.steps[0]), 0o644))

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
					require.NoError(t, os.WriteFile(faults, []byte(step), 0o644))
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
	require.NoError(t, os.WriteFile(filepath.Join(e.o.NvidiaDriverRoot, fakedriver.FaultFile), []byte(fabricLines("in-progress")), 0o644))
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
