package plugin

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/sim"
)

func TestTelemetryOptions(t *testing.T) {
	o := testOptions(t)
	o.Telemetry.Interval = 500 * time.Millisecond
	require.ErrorContains(t, o.Validate(), "--telemetry-interval")
	o.Telemetry.Interval = 0
	require.NoError(t, o.Validate(), "0 turns it off")
	o.Telemetry.Interval = time.Second
	require.NoError(t, o.Validate())
	require.Nil(t, newTelemetryService(o, nil, nil, nil), "no /metrics, no telemetry")
}

// TestTelemetryFollowsClaims runs the plugin on a simulated DGX H100 with
// telemetry every second: a prepared claim's GPU carries its claim and pod
// labels (with --telemetry-workload-labels; without, none), and a load once a
// process (what the fake root's CDI hook records for a running container)
// uses it; after the unprepare the labels are empty.
func TestTelemetryFollowsClaims(t *testing.T) {
	for _, tc := range []struct {
		name           string
		workloadLabels bool
	}{
		{name: "workload labels", workloadLabels: true},
		{name: "no workload labels", workloadLabels: false},
	} {
		t.Run(tc.name, func(t *testing.T) { testTelemetryFollowsClaims(t, tc.workloadLabels) })
	}
}

func testTelemetryFollowsClaims(t *testing.T, workloadLabels bool) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	o := testOptions(t)
	o.MetricsAddress = "127.0.0.1:0"
	o.Telemetry.Interval = time.Second
	o.Telemetry.WorkloadLabels = workloadLabels
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "11111111-2222-3333-4444-555555555555"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: o.DriverName, Pool: o.NodeName, Device: "gpu-5"}},
			}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer", UID: "pod-uid"}},
		},
	}
	_, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err)
	p, err := Start(ctx, o, client, cancel)
	require.NoError(t, err)
	defer p.Stop()

	gpu5 := func() map[string]string { // labels -> value of gpu-5's utilization series
		resp, err := http.Get("http://" + p.MetricsAddr.String() + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		_ = resp.Body.Close()
		out := map[string]string{}
		re := regexp.MustCompile(`(?m)^gpudra_gpu_utilization_ratio\{([^}]*device="gpu-5"[^}]*)\} (\S+)$`)
		for _, m := range re.FindAllStringSubmatch(string(body), -1) {
			out[m[1]] = m[2]
		}
		return out
	}
	const free = `claim_name="",claim_namespace="",device="gpu-5",mig_profile="",node="node-a",pod_name="",pod_namespace="",uuid="`
	require.Eventually(t, func() bool {
		for labels, v := range gpu5() {
			if strings.HasPrefix(labels, free) && v == "0" {
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "the free GPU is idle and unlabelled")

	conn, err := grpc.NewClient("unix://"+filepath.Join(o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	dra := drapb.NewDRAPluginClient(conn)
	claims := []*drapb.Claim{{Namespace: "ns", Name: "c1", Uid: string(claim.UID)}}
	resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
	require.NoError(t, err)
	require.Empty(t, resp.Claims[string(claim.UID)].Error)
	uuid := p.gpus.Node.GPUs[5].UUID
	require.NoError(t, sim.WriteProcess(filepath.Join(o.NvidiaDriverRoot, fakedriver.ProcessDir), "ctr", sim.Process{Devices: []string{uuid}}))

	held := `claim_name="c1",claim_namespace="ns",device="gpu-5",mig_profile="",node="node-a",pod_name="trainer",pod_namespace="ns",uuid="` + uuid + `"`
	if !workloadLabels {
		held = free + uuid + `"`
	}
	require.Eventually(t, func() bool {
		got := gpu5()
		v, ok := got[held]
		f, err := strconv.ParseFloat(v, 64)
		return len(got) == 1 && ok && err == nil && f > 0.3
	}, 10*time.Second, 100*time.Millisecond, "the held GPU is busy and labelled %s: %v", held, gpu5())

	require.NoError(t, sim.RemoveProcess(filepath.Join(o.NvidiaDriverRoot, fakedriver.ProcessDir), "ctr"))
	uresp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
	require.NoError(t, err)
	require.Empty(t, uresp.Claims[string(claim.UID)].Error)
	require.Eventually(t, func() bool {
		got := gpu5()
		return len(got) == 1 && got[free+uuid+`"`] == "0"
	}, 10*time.Second, 100*time.Millisecond, "labels clear after the unprepare: %v", gpu5())
}
