package plugin

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestMPSDaemonSupervised: the periodic check finds a prepared claim's MPS
// daemon gone (as when the rolling update's old plugin pod that started it
// exits), starts it again, and says so on the claim and its pod, and in the
// metrics.
func TestMPSDaemonSupervised(t *testing.T) {
	f := newLostFixture(t, false)
	f.o.MPSCheckInterval = 100 * time.Millisecond
	f.o.MetricsAddress = "127.0.0.1:0"
	const uid = "uid-mps"
	_, err := f.client.ResourceV1().ResourceClaims("ns").Create(f.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mps", UID: uid},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: f.o.DriverName, Pool: f.o.NodeName, Device: "gpu-1"}},
				Config: []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
					DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
						Driver: f.o.DriverName, Parameters: runtime.RawExtension{Raw: []byte(
							`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"MPS"}}`)},
					}}}},
			}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "worker", UID: "pod-uid"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(f.ctx)
	defer cancel(nil)
	p, err := Start(ctx, f.o, f.client, cancel)
	require.NoError(t, err)
	defer p.Stop()

	require.Empty(t, f.prepare("mps"))
	dir := filepath.Join(f.o.PluginDataDir(), "mps", uid)
	old := daemonPID(t, dir)
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))

	for _, kind := range []string{"ResourceClaim", "Pod"} {
		f.eventOn(kind, ReasonMPSDaemonReplaced, "CUDA processes that were connected to the old daemon lost their MPS server and must be restarted")
	}
	require.NotEqual(t, old, daemonPID(t, dir))
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, p), `gpudra_plugin_mps_daemons_restarted_total{result="replaced"} 1`)
	}, 10*time.Second, 50*time.Millisecond)
	require.Empty(t, f.unprepare("mps"))
	require.NoDirExists(t, dir)
}

func daemonPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "daemon.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.Fields(string(b))[0])
	require.NoError(t, err)
	return pid
}

func scrape(t *testing.T, p *Plugin) string {
	t.Helper()
	resp, err := http.Get("http://" + p.MetricsAddr.String() + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// eventOn polls for an event regarding an object of kind with reason whose
// note contains note.
func (f *lostFixture) eventOn(kind, reason, note string) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range l.Items {
			if e.Reason == reason && e.Regarding.Kind == kind && strings.Contains(e.Note, note) &&
				(kind != "Pod" || e.Regarding.UID == types.UID("pod-uid")) {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(f.t, err, "no %s event on a %s with %q", reason, kind, note)
}
