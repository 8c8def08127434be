package computedomain

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

func daemonClaim(t *testing.T, ns string, uid types.UID, domainUID string) *resourceapi.ResourceClaim {
	return newClaim(ns, "daemon-"+string(uid), uid,
		[]resourceapi.DeviceRequestAllocationResult{{Request: "daemon", Driver: names.Driver, Pool: "node-a", Device: DaemonDeviceName}},
		[]resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: names.Driver, Parameters: rawExtension(rawConfig(t, daemonCfg(domainUID)))}}}})
}

func member(name, ip, clique string, index int32) v1alpha1.ComputeDomainNode {
	return v1alpha1.ComputeDomainNode{Name: name, IPAddress: ip, CliqueID: clique, Index: index}
}

func TestNodesList(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  []v1alpha1.ComputeDomainNode
		clique string
		want   string
	}{
		{name: "no nodes yet", want: ""},
		{name: "by index, this clique only, without addresses left out", clique: "c.1", nodes: []v1alpha1.ComputeDomainNode{
			member("n3", "10.0.0.3", "c.1", 2), member("n1", "10.0.0.1", "c.1", 0), member("x", "10.9.0.1", "c.2", 1),
			member("n2", "fd00::2", "c.1", 1), member("n4", "", "c.1", 3)}, want: "10.0.0.1\nfd00::2\n10.0.0.3\n"},
		{name: "equal indexes by name", clique: "c.1", nodes: []v1alpha1.ComputeDomainNode{
			member("b", "10.0.0.2", "c.1", 0), member("a", "10.0.0.1", "c.1", 0)}, want: "10.0.0.1\n10.0.0.2\n"},
		{name: "no clique: the nodes without one", clique: "", nodes: []v1alpha1.ComputeDomainNode{
			member("a", "10.0.0.1", "", 0), member("b", "10.0.0.2", "c.1", 0)}, want: "10.0.0.1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, string(NodesList(domain("ns", "cd", "u1", tc.nodes...), tc.clique)))
		})
	}
}

func TestPrepareDaemon(t *testing.T) {
	cd := domain("team", "cd", "u1", member("node-a", "10.0.0.2", "clique.1", 1), member("node-b", "10.0.0.1", "clique.1", 0),
		member("node-c", "10.0.1.1", "clique.2", 0))
	n, client := testNode(t, &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": cd}}, nil, nil)
	got, err := n.Prepare(context.Background(), daemonClaim(t, "gpudra", "d1", "u1"))
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "daemon-0", got[0].Device)
	assert.Equal(t, &cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{fabricMgmtNode()},
		Env:         []string{"GPUDRA_IMEX_NODES_CONFIG=/run/gpudra-imex/nodes.cfg", "GPUDRA_DRIVER_ROOT=/driver-root"},
		Mounts: []*cdispec.Mount{
			{HostPath: "/var/lib/kubelet/plugins/compute-domain.gpudra.io/domains/u1", ContainerPath: "/run/gpudra-imex",
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
			{HostPath: "/run/nvidia/driver", ContainerPath: "/driver-root", Options: []string{"rbind", "rslave", "rw", "nosuid"}},
		},
	}, got[0].Edits)
	data, err := os.ReadFile(filepath.Join(n.cfg.DomainsDir, "u1", NodesConfigFile))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1\n10.0.0.2\n", string(data))
	assert.Equal(t, []PreparedClaim{{UID: "d1", Kind: TypeDaemon, DomainID: "u1", Ready: true}}, prepared(t, n))
	assert.Empty(t, nodeLabels(t, client), "a daemon claim does not label the node")

	// Without a clique, a daemon claim needs no fabric management node.
	n.cfg.CliqueID, n.cfg.FabricMgmt = "", nil
	got, err = n.Prepare(context.Background(), daemonClaim(t, "gpudra", "d2", "u1"))
	require.NoError(t, err)
	assert.Empty(t, got[0].Edits.DeviceNodes)
	data, err = os.ReadFile(filepath.Join(n.cfg.DomainsDir, "u1", NodesConfigFile))
	require.NoError(t, err)
	assert.Empty(t, data, "no node of the domain is without a clique")
}

func TestPrepareDaemonRefused(t *testing.T) {
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
	for _, tc := range []struct {
		name, ns, domain, wantErr string
		noFabricMgmt              bool
	}{
		{"outside the driver's namespace", "team", "u1", "daemon claims are served only in the driver's namespace gpudra", false},
		{"domain gone", "gpudra", "u2", "ComputeDomain with UID u2 not found", false},
		{"a clique without the fabric management capability", "gpudra", "u1",
			"in NVLink clique clique.1, but the driver offers no IMEX fabric management capability", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := testNode(t, cds, nil, nil)
			if tc.noFabricMgmt {
				n.cfg.FabricMgmt = nil
			}
			_, err := n.Prepare(context.Background(), daemonClaim(t, tc.ns, "d1", tc.domain))
			require.ErrorContains(t, err, tc.wantErr)
			assert.Empty(t, prepared(t, n))
			assert.NoDirExists(t, filepath.Join(n.cfg.DomainsDir, tc.domain))
		})
	}
}

func TestSyncNodes(t *testing.T) {
	cd := domain("team", "cd", "u1")
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": cd}}
	n, _ := testNode(t, cds, nil, nil)
	ctx := context.Background()
	file := filepath.Join(n.cfg.DomainsDir, "u1", NodesConfigFile)

	wrote, err := n.SyncNodes(ctx, cd)
	require.NoError(t, err)
	assert.False(t, wrote, "no daemon claim of the domain here")
	assert.NoFileExists(t, file)

	_, err = n.Prepare(ctx, daemonClaim(t, "gpudra", "d1", "u1"))
	require.NoError(t, err)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Empty(t, data, "no node has an address yet")
	wrote, err = n.SyncNodes(ctx, cd)
	require.NoError(t, err)
	assert.False(t, wrote, "unchanged")

	before, err := os.Stat(file)
	require.NoError(t, err)
	cd.Status.Nodes = []v1alpha1.ComputeDomainNode{member("node-a", "10.0.0.1", "clique.1", 0), member("node-x", "10.0.0.9", "other", 0)}
	wrote, err = n.SyncNodes(ctx, cd)
	require.NoError(t, err)
	assert.True(t, wrote)
	data, err = os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1\n", string(data))
	after, err := os.Stat(file)
	require.NoError(t, err)
	assert.False(t, os.SameFile(before, after), "replaced by a rename, not written in place")
	entries, err := os.ReadDir(filepath.Dir(file))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}

func TestUnprepareDaemon(t *testing.T) {
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
	n, _ := testNode(t, cds, nil, nil)
	ctx := context.Background()
	dir := filepath.Join(n.cfg.DomainsDir, "u1")
	// A replaced daemon pod's new claim can be prepared before the old
	// one is unprepared.
	for _, uid := range []types.UID{"d1", "d2"} {
		_, err := n.Prepare(ctx, daemonClaim(t, "gpudra", uid, "u1"))
		require.NoError(t, err)
	}
	require.NoError(t, n.Unprepare(ctx, "d1"))
	assert.FileExists(t, filepath.Join(dir, NodesConfigFile), "d2 still uses the node list")
	require.NoError(t, n.Unprepare(ctx, "d2"))
	assert.NoDirExists(t, dir)
	assert.Empty(t, prepared(t, n))
}
