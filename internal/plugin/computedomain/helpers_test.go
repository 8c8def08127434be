package computedomain

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// fakeRoot generates a fake driver root (test/fakedriver) in a temporary
// directory and returns its roots as the plugin would compute them. The
// simulated NVML library and tools are empty stand-ins: these tests read
// only the root's proc/devices and create device nodes, which needs root.
func fakeRoot(t *testing.T) nvmllib.Roots {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a fake driver root has device nodes and channels are created with mknod: run as root")
	}
	tools := t.TempDir()
	for _, tool := range fakedriver.Tools {
		require.NoError(t, os.WriteFile(filepath.Join(tools, tool), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	}
	lib := filepath.Join(tools, "libnvidia-ml-sim.so")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	root := filepath.Join(t.TempDir(), "driver-root")
	require.NoError(t, fakedriver.Generate(fakedriver.Options{Dir: root, Profile: "dgx-h100", Node: "node-a",
		NVMLLibrary: lib, ToolsDir: tools, Layout: "gke"}))
	roots := nvmllib.DriverRoots(root, "/run/nvidia/driver")
	require.Equal(t, root, roots.Dev, "the fake root has its own dev/")
	require.Equal(t, filepath.Join(root, "proc"), roots.Proc, "the fake root has its own proc/")
	return roots
}

func rawExtension(raw []byte) runtime.RawExtension { return runtime.RawExtension{Raw: raw} }

func newClaim(ns, name string, uid types.UID, results []resourceapi.DeviceRequestAllocationResult,
	configs []resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results, Config: configs}}}}
}

// domains is a DomainGetter over a map, whose domains a test changes;
// onGet, if set, runs at each get (before the lookup).
type domains struct {
	mu    sync.Mutex
	byUID map[string]*v1alpha1.ComputeDomain
	gets  int
	onGet func(d *domains)
}

func (d *domains) GetDomain(_ context.Context, uid string) (*v1alpha1.ComputeDomain, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gets++
	if d.onGet != nil {
		d.onGet(d)
	}
	cd, ok := d.byUID[uid]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.ComputeDomainResource}, uid)
	}
	return cd.DeepCopy(), nil
}

func domain(ns, name, uid string, nodes ...v1alpha1.ComputeDomainNode) *v1alpha1.ComputeDomain {
	return &v1alpha1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Status: v1alpha1.ComputeDomainStatus{Nodes: nodes}}
}

// testNode is a Node of node-a with 4 channels on a fake client holding
// node-a with labels, its channels in a temporary directory.
func testNode(t *testing.T, cds DomainGetter, channels *Channels, labels map[string]string) (*Node, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: labels, ResourceVersion: "1"}})
	if channels == nil {
		channels = &Channels{Dev: t.TempDir(), Major: fakedriver.IMEXChannelsMajor}
	}
	n, err := NewNode(Config{NodeName: "node-a", Names: names, Client: client, Domains: cds, Channels: channels, ChannelCount: 4,
		CliqueID: "clique.1", DaemonNamespace: "gpudra", DomainsDir: filepath.Join(t.TempDir(), "domains"),
		HostDomainsDir: "/var/lib/kubelet/plugins/compute-domain.gpudra.io/domains", HostDriverRoot: "/run/nvidia/driver", FabricMgmt: fabricMgmtNode()})
	require.NoError(t, err)
	return n, client
}

func nodeLabels(t *testing.T, client *fake.Clientset) map[string]string {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	return node.Labels
}

func fabricMgmtNode() *cdispec.DeviceNode {
	mode := os.FileMode(0o666)
	return &cdispec.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap4", Type: "c", Major: 243, Minor: 4, FileMode: &mode}
}

// prepared is what n's store holds.
func prepared(t *testing.T, n *Node) []PreparedClaim {
	t.Helper()
	got, err := n.Prepared(context.Background())
	require.NoError(t, err)
	return got
}

// restore puts claims into n's store, as an earlier or another instance
// of the plugin left them.
func restore(t *testing.T, n *Node, claims ...PreparedClaim) {
	t.Helper()
	for _, c := range claims {
		require.NoError(t, n.cfg.Store.Put(context.Background(), c))
	}
}
