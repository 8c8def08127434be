package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/test/chart"
	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/fmsim"
)

// libnvfmLoaded says whether this process has a libnvfm mapped.
func libnvfmLoaded(t *testing.T) bool {
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Contains(string(maps), "libnvfm")
}

// TestFabricManagerPartitioning starts the plugin on a fake driver root of
// a DGX H100 whose simulated Fabric Manager runs in shared NVSwitch mode,
// in both modes, with --fabric-manager-partitioning off and on: off, no
// libnvfm is loaded and nothing changes; on, the published GPUs carry
// gpuModuleID and partition<N>, and a claim of gpu-0 and gpu-2 (modules 1
// and 3) prepared through dra.sock activates partition 3, its unprepare
// deactivates it.
func TestFabricManagerPartitioning(t *testing.T) {
	tests := []struct {
		name          string
		compatibility string
		on            bool
	}{
		{name: "native, off"},
		{name: "nvidia, off", compatibility: "nvidia"},
		{name: "native, on", on: true},
		{name: "nvidia, on", compatibility: "nvidia", on: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			o := testOptions(t)
			o.NvidiaDriverRoot = fakedriver.FMRootForTest(t)
			o.Compatibility, o.FabricManagerPartitioning = tc.compatibility, tc.on
			require.NoError(t, o.Validate())
			require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
			loadedBefore := libnvfmLoaded(t)
			client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})
			claim := &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "11111111-2222-3333-4444-555555555555"},
				Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
					Results: []resourceapi.DeviceRequestAllocationResult{
						{Request: "gpu", Driver: o.DriverName, Pool: o.NodeName, Device: "gpu-0"},
						{Request: "gpu", Driver: o.DriverName, Pool: o.NodeName, Device: "gpu-2"},
					},
				}}},
			}
			_, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{})
			require.NoError(t, err)
			p, err := Start(ctx, o, client, cancel)
			require.NoError(t, err)
			defer p.Stop()

			var devices []resourceapi.Device
			require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
				if err != nil || len(l.Items) != 1 {
					return false, nil
				}
				devices = l.Items[0].Spec.Devices
				return len(devices) == 8, nil
			}))
			for _, d := range devices {
				module, hasModule := d.Attributes["gpuModuleID"]
				_, hasPartition := d.Attributes["partition1"]
				assert.Equal(t, tc.on || tc.compatibility == "", hasModule, "%s gpuModuleID", d.Name)
				assert.Equal(t, tc.on, hasPartition, "%s partition1", d.Name)
				if d.Name == "gpu-0" && tc.on {
					assert.Equal(t, int64(1), *module.IntValue)
					for attr, id := range map[string]int64{"partition8": 0, "partition4": 1, "partition2": 3, "partition1": 7} {
						assert.Equal(t, id, *d.Attributes[resourceapi.QualifiedName(attr)].IntValue, attr)
					}
				}
			}

			conn, err := grpc.NewClient("unix://"+filepath.Join(o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			dra := drapb.NewDRAPluginClient(conn)
			claims := []*drapb.Claim{{Namespace: "ns", Name: "c1", Uid: string(claim.UID)}}
			resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
			require.NoError(t, err)
			require.Empty(t, resp.Claims[string(claim.UID)].Error)
			statePath := filepath.Join(o.NvidiaDriverRoot, fmsim.StatePath)
			state, err := fmsim.ReadState(statePath)
			require.NoError(t, err)
			if tc.on {
				assert.Equal(t, []int{3}, state.Active)
			} else {
				assert.Empty(t, state.Active)
			}
			uresp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
			require.NoError(t, err)
			require.Empty(t, uresp.Claims[string(claim.UID)].Error)
			state, err = fmsim.ReadState(statePath)
			require.NoError(t, err)
			assert.Empty(t, state.Active)
			if !tc.on {
				if loadedBefore {
					t.Log("libnvfm was loaded by an earlier test of this process; cannot tell whether this one loaded it")
				} else {
					assert.False(t, libnvfmLoaded(t), "with partitioning off, libnvfm is not loaded")
				}
			}
			require.NoError(t, context.Cause(ctx))
		})
	}
}

// TestFabricManagerStartFails: with partitioning on, a node whose GPUs
// have module IDs but whose Fabric Manager cannot be reached does not
// start, and says what to fix; with it off the same node starts.
func TestFabricManagerStartFails(t *testing.T) {
	tests := []struct {
		name  string
		root  func(t *testing.T) string
		env   map[string]string
		wants []string
	}{
		{name: "no-libnvfm", // dgx-h100 without Fabric Manager
			root:  func(t *testing.T) string { return fakedriver.ForTest(t, "dgx-h100", "node-a") },
			wants: []string{"client library is missing", "libnvfm.so.1 or libnvfm.so", "--fabric-manager-partitioning=false"}},
		{name: "no-daemon", root: func(t *testing.T) string { return fakedriver.FMRootForTest(t) },
			env:   map[string]string{"NVIDIA_FABRICMANAGER_UNIX_SOCKET": "/nonexistent/fm.socket"},
			wants: []string{"unix socket /nonexistent/fm.socket", "CONNECTION_NOT_VALID", "FABRIC_MODE=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			o := testOptions(t)
			o.NvidiaDriverRoot = tc.root(t)
			o.FabricManagerPartitioning = true
			require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
			client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})
			_, err := Start(ctx, o, client, cancel)
			require.Error(t, err)
			for _, w := range tc.wants {
				assert.ErrorContains(t, err, w)
			}
			o.FabricManagerPartitioning = false
			p, err := Start(ctx, o, client, cancel)
			require.NoError(t, err, "off, the same node starts")
			p.Stop()
		})
	}
}

// TestChartFabricManagerPartitioning: kubeletPlugin.fabricManagerPartitioning,
// a node group's, or NVIDIA's featureGates.FabricManagerPartitioning reach
// the plugin as --fabric-manager-partitioning (parsed by its own flags).
func TestChartFabricManagerPartitioning(t *testing.T) {
	tests := []struct {
		name string
		set  string
		want map[string]bool // by DaemonSet name suffix
	}{
		{name: "default: off", set: "compatibility=", want: map[string]bool{"": false}},
		{name: "on", set: "kubeletPlugin.fabricManagerPartitioning=true", want: map[string]bool{"": true}},
		{name: "NVIDIA's gate", set: "compatibility=nvidia,featureGates.FabricManagerPartitioning=true", want: map[string]bool{"": true}},
		{name: "NVIDIA's gate off", set: "featureGates.FabricManagerPartitioning=false", want: map[string]bool{"": false}},
		{name: "one node group", set: "kubeletPlugin.nodeGroups[0].name=hgx,kubeletPlugin.nodeGroups[0].nodeSelector.hgx=yes," +
			"kubeletPlugin.nodeGroups[0].fabricManagerPartitioning=true", want: map[string]bool{"": false, "-hgx": true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plugins := chartPluginOptions(t, chart.Render(t, "--set", tc.set))
			got := map[string]bool{}
			for name, o := range plugins {
				got[name] = o.FabricManagerPartitioning
			}
			require.Equal(t, tc.want, got)
		})
	}
}
