package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// testOptions runs the plugin's real code path on a fake driver root of a
// simulated DGX H100 (test/fakedriver).
func testOptions(t *testing.T) *Options {
	dir := t.TempDir()
	return &Options{
		NodeName: "node-a", DriverName: "gpu.gpudra.io", MaxDevicesPerSlice: 128,
		NvidiaDriverRoot: fakedriver.ForTest(t, "dgx-h100", "node-a"),
		CDIRoot:          filepath.Join(dir, "cdi"), KubeletPluginsDir: filepath.Join(dir, "plugins"),
		KubeletRegistrarDir: filepath.Join(dir, "registry"), NvidiaCDIHookSource: testHookSource(t, dir, "hook v1"),
	}
}

func TestOptionsValidate(t *testing.T) {
	o := testOptions(t)
	require.NoError(t, o.Validate())
	o.NodeName = ""
	require.ErrorContains(t, o.Validate(), "--node-name")
	o = testOptions(t)
	o.MaxDevicesPerSlice = 129
	require.ErrorContains(t, o.Validate(), "between 1 and 128")
	o = testOptions(t)
	o.NUMANodeAttribute = "lists"
	require.ErrorContains(t, o.Validate(), `--numa-node-attribute="lists": must be "scalar" or "list"`)
	o = testOptions(t)
	o.NUMANodeAttribute = "list"
	require.NoError(t, o.Validate())
}

// The inspect command must print 8 H100s for the dgx-h100 profile.
func TestInspectDGXH100(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(t)
	ins, err := Inspect(ctx, o)
	require.NoError(t, err)
	require.Len(t, ins.Node.GPUs, 8)
	require.Len(t, ins.ResourceSlices, 1)
	require.Len(t, ins.ResourceSlices[0].Spec.Devices, 8)
	for _, d := range ins.ResourceSlices[0].Spec.Devices {
		require.Equal(t, "NVIDIA H100 80GB HBM3", *d.Attributes["productName"].StringValue)
	}
	var buf bytes.Buffer
	require.NoError(t, ins.Print(&buf, "json"))
	var back Inspection
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Len(t, back.ResourceSlices[0].Spec.Devices, 8)
	buf.Reset()
	require.NoError(t, ins.Print(&buf, "yaml"))
	require.Contains(t, buf.String(), "productName: NVIDIA H100 80GB HBM3")
	require.ErrorContains(t, ins.Print(&buf, "xml"), "unknown output format")
}

func TestInspectWithoutDriver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(t)
	o.NvidiaDriverRoot = t.TempDir()
	_, err := Inspect(ctx, o)
	require.ErrorContains(t, err, "make fake-driver-root", "the error says how to run without GPUs")
}

func TestHandleError(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var cause error
	d := &Driver{cancel: func(err error) { cause = err }}
	d.HandleError(ctx, errors.New("bad"), "publishing")
	require.ErrorContains(t, cause, "fatal background error: publishing")
}

// TestKubeletPath starts the plugin with a fake API server and calls its
// dra.sock exactly as the kubelet does: prepare, repeat, unprepare.
func TestKubeletPath(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	o := testOptions(t)
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "11111111-2222-3333-4444-555555555555"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: o.DriverName, Pool: o.NodeName, Device: "gpu-5"}},
		}}},
	}
	_, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err)

	_, err = Start(ctx, o, client, cancel)
	require.ErrorContains(t, err, "registration directory")
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	o.MetricsAddress = "127.0.0.1:0"
	p, err := Start(ctx, o, client, cancel)
	require.NoError(t, err)
	defer p.Stop()

	// The ResourceSlice gets published for the node.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == 8, nil
	}))

	conn, err := grpc.NewClient("unix://"+filepath.Join(o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	dra := drapb.NewDRAPluginClient(conn)
	req := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "ns", Name: "c1", Uid: string(claim.UID)}}}
	for i := 0; i < 2; i++ { // the second call must return the same result
		resp, err := dra.NodePrepareResources(ctx, req)
		require.NoError(t, err)
		r := resp.Claims[string(claim.UID)]
		require.Empty(t, r.Error)
		require.Len(t, r.Devices, 1)
		require.Equal(t, "gpu-5", r.Devices[0].DeviceName)
		require.Equal(t, []string{cdi.DeviceID(string(claim.UID), "gpu-5")}, r.Devices[0].CdiDeviceIds)
	}
	specPath := filepath.Join(o.CDIRoot, cdi.SpecName(string(claim.UID))+".json")
	require.FileExists(t, specPath)

	uresp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req.Claims})
	require.NoError(t, err)
	require.Empty(t, uresp.Claims[string(claim.UID)].Error)
	_, err = os.Stat(specPath)
	require.True(t, os.IsNotExist(err))

	// The kubelet's view shows up in the metrics.
	resp, err := http.Get("http://" + p.MetricsAddr.String() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Contains(t, string(body), `gpudra_plugin_prepare_duration_seconds_count{result="success"} 2`)
	require.Contains(t, string(body), `gpudra_plugin_unprepare_duration_seconds_count{result="success"} 1`)
	require.Contains(t, string(body), `gpudra_plugin_prepared_claims 0`)
	// Not ready until the kubelet confirms the registration, as it does
	// through the registration socket.
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + p.MetricsAddr.String() + "/readyz")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	code, body2 := readyz()
	require.Equal(t, http.StatusInternalServerError, code)
	require.Contains(t, body2, "kubelet-registration: the kubelet has not confirmed the registration yet")
	regConn, err := grpc.NewClient("unix://"+filepath.Join(o.KubeletRegistrarDir, o.DriverName+"-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer regConn.Close()
	_, err = registerapi.NewRegistrationClient(regConn).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	code, body2 = readyz()
	require.Equal(t, http.StatusOK, code, body2)
	require.NoError(t, context.Cause(ctx))
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)
