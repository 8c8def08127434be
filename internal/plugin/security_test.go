package plugin

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
)

// startForTest starts the plugin on a fake API server holding claims and
// returns a dra.sock client. Files go below one root directory.
func startForTest(t *testing.T, claims ...*resourceapi.ResourceClaim) (*Options, drapb.DRAPluginClient, string) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	t.Cleanup(func() { cancel(nil) })
	o := testOptions(t)
	root := filepath.Dir(o.CDIRoot)
	require.NoError(t, os.MkdirAll(o.KubeletRegistrarDir, 0o750))
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: "node-uid"}})
	for _, c := range claims {
		_, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	p, err := Start(ctx, o, client, cancel)
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	conn, err := grpc.NewClient("unix://"+filepath.Join(o.PluginDataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return o, drapb.NewDRAPluginClient(conn), root
}

func allocated(o *Options, ns, name, uid, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: k8stypes.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: o.DriverName, Pool: o.NodeName, Device: device}},
		}}},
	}
}

// files lists every regular file below root, relative to it, except the
// per-device lock files (named by device, created on first use).
func files(t *testing.T, root string) []string {
	var out []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && filepath.Base(filepath.Dir(path)) != "locks" {
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel)
		}
		return err
	}))
	return out
}

// A claim UID names the CDI spec and the checkpoint record. UIDs come from
// the API server, but the plugin does not rely on that: a UID that could
// leave the directories is refused before anything is written, and a claim
// name never becomes part of a path.
func TestPrepareCannotEscapeDirectories(t *testing.T) {
	o := testOptions(t)
	evil := []string{"../../../escape", "a/b", "..", ".", "x\x00y", strings.Repeat("a", 300), "/abs"}
	var claims []*resourceapi.ResourceClaim
	for i, uid := range evil {
		claims = append(claims, allocated(o, "ns", "c"+string(rune('a'+i)), uid, "gpu-0"))
	}
	odd := allocated(o, "ns", "../../name-is-not-a-path", "22222222-2222-2222-2222-222222222222", "gpu-1")
	claims = append(claims, odd)
	o, dra, root := startForTest(t, claims...)
	before := files(t, root)

	for _, c := range claims[:len(evil)] {
		resp, err := dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{
			Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
		if err == nil {
			require.NotEmpty(t, resp.Claims[string(c.UID)].GetError(), "UID %q must be refused", c.UID)
		}
	}
	require.Equal(t, before, files(t, root), "a refused claim wrote a file")
	_, err := os.Stat(filepath.Join(filepath.Dir(root), "escape"))
	require.True(t, os.IsNotExist(err))

	resp, err := dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: odd.Namespace, Name: odd.Name, Uid: string(odd.UID)}}})
	require.NoError(t, err)
	require.Empty(t, resp.Claims[string(odd.UID)].GetError())
	for _, f := range files(t, root) {
		require.NotContains(t, f, "name-is-not-a-path")
	}
	require.FileExists(t, filepath.Join(o.CDIRoot, cdi.SpecName(string(odd.UID))+".json"))
}

// What the plugin writes cannot be changed by other users of the node: CDI
// specs and checkpoint records are not group- or world-writable, the
// checkpoint directory is private, and nobody but the owner (root, like the
// kubelet) may connect to the plugin's sockets.
func TestFileAndSocketPermissions(t *testing.T) {
	// The most permissive umask, as in some container images: the modes
	// must come from the plugin, not from the environment.
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	o := testOptions(t)
	claim := allocated(o, "ns", "c1", "33333333-3333-3333-3333-333333333333", "gpu-2")
	o, dra, _ := startForTest(t, claim)
	resp, err := dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "ns", Name: "c1", Uid: string(claim.UID)}}})
	require.NoError(t, err)
	require.Empty(t, resp.Claims[string(claim.UID)].GetError())

	mode := func(path string) fs.FileMode {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.Mode()
	}
	spec := filepath.Join(o.CDIRoot, cdi.SpecName(string(claim.UID))+".json")
	require.Zero(t, mode(spec).Perm()&0o022, "CDI spec %s is %v", spec, mode(spec))
	records, err := filepath.Glob(filepath.Join(o.CheckpointDir(), "*", string(claim.UID)+".json"))
	require.NoError(t, err)
	require.Len(t, records, 1)
	require.Zero(t, mode(records[0]).Perm()&0o077, "checkpoint record is %v", mode(records[0]))
	require.Equal(t, fs.FileMode(0o700), mode(o.CheckpointDir()).Perm())
	for _, sock := range []string{filepath.Join(o.PluginDataDir(), "dra.sock"), filepath.Join(o.KubeletRegistrarDir, o.DriverName+"-reg.sock")} {
		m := mode(sock)
		require.NotZero(t, m&fs.ModeSocket, sock)
		require.Zero(t, m.Perm()&0o002, "others may connect to %s (%v)", sock, m)
	}
}
