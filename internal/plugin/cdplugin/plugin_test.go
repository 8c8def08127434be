package cdplugin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/imex"
	"github.com/gpudra/gpudra/test/fakedriver"
)

var (
	names     = compat.Names{}.ComputeDomain()
	nativeGVR = v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ComputeDomainResource)
)

// env is a node of a simulated GB200 tray (a fake driver root with an
// NVLink clique) on a fake API server serving gpudra's ComputeDomains.
type env struct {
	o      *Options
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
}

func newEnv(t *testing.T) *env {
	dir := t.TempDir()
	o := &Options{NodeName: "node-a", Namespace: "gpudra", NvidiaDriverRoot: fakedriver.ForTest(t, "gb200-nvl72-tray", "node-a"),
		CDIRoot: filepath.Join(dir, "cdi"), KubeletPluginsDir: filepath.Join(dir, "plugins"),
		KubeletRegistrarDir: filepath.Join(dir, "registry"), Channels: 4, MaxDevicesPerSlice: 128, HealthAddress: "127.0.0.1:0",
		DaemonReadyWait: 3 * time.Second, FabricRetryInterval: 50 * time.Millisecond}
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "1"}})
	client.Resources = []*metav1.APIResourceList{{GroupVersion: nativeGVR.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: nativeGVR.Resource, Namespaced: true, Kind: v1alpha1.ComputeDomainKind}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{nativeGVR: "ComputeDomainList"})
	return &env{o: o, client: client, dyn: dyn}
}

func (e *env) start(t *testing.T, ctx context.Context, cancel context.CancelCauseFunc) *Plugin {
	t.Helper()
	p, err := Start(ctx, e.o, e.client, e.dyn, cancel)
	require.NoError(t, err)
	return p
}

// setDomain creates or replaces ComputeDomain team/cd (UID u1) whose status
// has node-a in clique with the given state.
func (e *env) setDomain(t *testing.T, ctx context.Context, clique string, state v1alpha1.ComputeDomainState) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": nativeGVR.GroupVersion().String(), "kind": v1alpha1.ComputeDomainKind,
		"metadata": map[string]any{"name": "cd", "namespace": "team", "uid": "u1"},
		"spec":     map[string]any{"numNodes": int64(1), "channel": map[string]any{"resourceClaimTemplate": map[string]any{"name": "t"}}},
		"status": map[string]any{"status": string(state), "nodes": []any{map[string]any{"name": "node-a", "ipAddress": "10.0.0.1",
			"cliqueID": clique, "index": int64(0), "status": string(state)}}},
	}}
	res := e.dyn.Resource(nativeGVR).Namespace("team")
	if _, err := res.Get(ctx, "cd", metav1.GetOptions{}); err == nil {
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
		require.NoError(t, err)
		return
	}
	_, err := res.Create(ctx, u, metav1.CreateOptions{})
	require.NoError(t, err)
}

// claim creates an allocated claim of one device of the channel driver.
func (e *env) claim(t *testing.T, ctx context.Context, ns, name, uid, request, device, kind string) *drapb.Claim {
	t.Helper()
	c := allocatedClaim(t, ns, name, uid, request, device, kind)
	_, err := e.client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
	require.NoError(t, err)
	return &drapb.Claim{Namespace: ns, Name: name, Uid: uid}
}

// allocatedClaim is a claim of one device of the channel driver on node-a,
// allocated with a configuration of kind for domain u1.
func allocatedClaim(t *testing.T, ns, name, uid, request, device, kind string) *resourceapi.ResourceClaim {
	t.Helper()
	raw, err := json.Marshal(imex.ClaimConfig{APIVersion: names.ConfigAPIVersion, Kind: kind, DomainID: "u1"})
	require.NoError(t, err)
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: typesUID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: request, Driver: names.Driver, Pool: "node-a", Device: device}},
			Config: []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: names.Driver, Parameters: runtime.RawExtension{Raw: raw}}}}},
		}}}}
}

// records are the per-claim records of the env's plugin data dir.
func (e *env) records() records {
	return newRecords(e.o.PluginDataDir(), e.o.NodeName)
}

func (e *env) dra(t *testing.T) drapb.DRAPluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(e.o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return drapb.NewDRAPluginClient(conn)
}

func (e *env) label(t *testing.T, ctx context.Context) string {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	return n.Labels[names.Label]
}

// spec reads the CDI spec of a claim.
func (e *env) spec(t *testing.T, uid string) *cdispec.Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.o.CDIRoot, "k8s.compute-domain.gpudra.io-claim_"+uid+".json"))
	require.NoError(t, err)
	var s cdispec.Spec
	require.NoError(t, json.Unmarshal(data, &s))
	return &s
}

// TestKubeletPath starts the channel plugin and calls its dra.sock as the
// kubelet does: publish, prepare (daemon not ready, then ready), a daemon
// claim, restart, unprepare.
func TestKubeletPath(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := newEnv(t)
	p := e.start(t, ctx, cancel)
	stopped := false
	defer func() {
		if !stopped {
			p.Stop()
		}
	}()
	require.NotEmpty(t, p.CliqueID, "the GB200 tray's GPUs are in a clique")

	// The devices are published: 4 channels and the daemon, with the clique.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == 5, nil
	}))
	l, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, names.Driver, l.Items[0].Spec.Driver)
	for _, d := range l.Items[0].Spec.Devices {
		require.Equal(t, p.CliqueID, *d.Attributes[slice.AttrCliqueID].StringValue, d.Name)
	}

	dra := e.dra(t)
	e.setDomain(t, ctx, p.CliqueID, v1alpha1.DomainNotReady)
	c1 := e.claim(t, ctx, "team", "c1", "c1", "channel", "channel-1", names.ChannelConfigKind)
	prepare := func(c *drapb.Claim) *drapb.NodePrepareResourceResponse {
		t.Helper()
		var r *drapb.NodePrepareResourceResponse
		// The informer sees the domain shortly after it is written.
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{c}})
			require.NoError(t, err)
			r = resp.Claims[c.Uid]
			return !contains(r.Error, "not found"), nil
		}))
		return r
	}
	r := prepare(c1)
	require.Contains(t, r.Error, computedomain.ErrDaemonNotReady.Error(), "retried by the kubelet until the daemon is ready")
	require.Equal(t, "u1", e.label(t, ctx), "the node is labelled so that the daemon starts")

	// Calls are not serialized: while c1's prepare waits for the daemon,
	// the daemon's own claim is prepared (serial calls would hold it behind
	// c1 until c1's wait ran out).
	type answer struct {
		resp *drapb.NodePrepareResourcesResponse
		err  error
	}
	waiting := make(chan answer, 1)
	go func() {
		resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{c1}})
		waiting <- answer{resp, err}
	}()
	time.Sleep(200 * time.Millisecond) // c1 waits in the plugin
	d1 := e.claim(t, ctx, "gpudra", "d1", "d1", "daemon", computedomain.DaemonDeviceName, names.DaemonConfigKind)
	began := time.Now()
	r = prepare(d1)
	require.Empty(t, r.Error)
	require.Less(t, time.Since(began), e.o.DaemonReadyWait, "the daemon's claim waited for the channel claim")
	select {
	case a := <-waiting:
		t.Fatalf("c1's prepare returned before the daemon was ready: %+v %v", a.resp, a.err)
	default:
	}
	e.setDomain(t, ctx, p.CliqueID, v1alpha1.DomainReady)
	a := <-waiting
	require.NoError(t, a.err)
	r = a.resp.Claims[c1.Uid]
	require.Empty(t, r.Error, "c1's prepare, waiting in the plugin, goes on once the daemon is ready")
	require.Len(t, r.Devices, 1)
	require.Equal(t, []string{"k8s.compute-domain.gpudra.io/claim=c1-channel-1"}, r.Devices[0].CdiDeviceIds)
	nodes := e.spec(t, "c1").Devices[0].ContainerEdits.DeviceNodes
	require.Len(t, nodes, 1)
	require.Equal(t, computedomain.ChannelPath(1), nodes[0].Path)
	require.Equal(t, int64(fakedriver.IMEXChannelsMajor), nodes[0].Major)
	require.FileExists(t, filepath.Join(e.o.NvidiaDriverRoot, computedomain.ChannelPath(1)), "created with mknod")

	// The IMEX daemon's claim gets the driver's fabric management capability.
	edits := e.spec(t, "d1").Devices[0].ContainerEdits
	require.Len(t, edits.DeviceNodes, 1)
	require.Equal(t, int64(fakedriver.FabricIMEXMgmtMinor), edits.DeviceNodes[0].Minor)
	require.FileExists(t, filepath.Join(e.o.PluginDataDir(), "domains", "u1", computedomain.NodesConfigFile))

	// Ready and health answer.
	code, _ := get(t, "http://"+p.health.Addr.String()+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := get(t, "http://"+p.health.Addr.String()+"/readyz")
	require.Equal(t, http.StatusInternalServerError, code, "the kubelet has not confirmed the registration")
	require.Contains(t, body, "kubelet-registration")

	// A restart restores the prepared claims from their records.
	p.Stop()
	stopped = true
	p2 := e.start(t, ctx, cancel)
	defer p2.Stop()
	require.ElementsMatch(t, []computedomain.PreparedClaim{
		{UID: "c1", Kind: computedomain.TypeChannel, DomainID: "u1", Ready: true},
		{UID: "d1", Kind: computedomain.TypeDaemon, DomainID: "u1", Ready: true},
	}, prepared(t, ctx, p2.Node))

	dra = e.dra(t)
	uresp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{c1, d1}})
	require.NoError(t, err)
	require.Empty(t, uresp.Claims["c1"].Error)
	require.Empty(t, uresp.Claims["d1"].Error)
	require.Empty(t, e.label(t, ctx), "the last claim of the domain took the label away")
	entries, err := os.ReadDir(e.o.CDIRoot)
	require.NoError(t, err)
	require.Empty(t, entries)
	claims, err := e.records().load(ctx)
	require.NoError(t, err)
	require.Empty(t, claims)
	require.NoError(t, context.Cause(ctx))
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, string(body)
}
