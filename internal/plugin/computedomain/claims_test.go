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
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

func TestClaimsPrepareAndUnprepare(t *testing.T) {
	roots := fakeRoot(t)
	channels, err := NewChannels(roots)
	require.NoError(t, err)
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{
		"u1": domain("team", "cd", "u1", ready("node-a")),
		"u2": domain("team", "cd2", "u2", ready("node-a")),
	}}
	n, client := testNode(t, cds, channels, nil)
	dir := filepath.Join(t.TempDir(), "cdi")
	c, err := NewClaims(n, dir)
	require.NoError(t, err)
	ctx := context.Background()

	c1 := channelClaim(t, "team", "c1", "channel-1", channelCfg("u1", ""))
	c2 := channelClaim(t, "team", "c2", "channel-0", channelCfg("u2", "")) // the node is u1's by then
	d1 := daemonClaim(t, "gpudra", "d1", "u1")
	got, err := c.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c1, c2, d1})
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []kubeletplugin.Device{{Requests: []string{"channel"}, PoolName: "node-a", DeviceName: "channel-1",
		CDIDeviceIDs: []string{"k8s.compute-domain.gpudra.io/claim=c1-channel-1"}}}, got["c1"].Devices)
	require.NoError(t, got["c1"].Err)
	require.ErrorContains(t, got["c2"].Err, "already belongs to ComputeDomain u1", "one claim's error is its own")
	assert.Empty(t, got["c2"].Devices)
	require.NoError(t, got["d1"].Err)
	assert.Equal(t, []string{"k8s.compute-domain.gpudra.io/claim=d1-daemon-0"}, got["d1"].Devices[0].CDIDeviceIDs)

	// The specs are valid CDI and define the devices the IDs name.
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors())
	ch := cache.GetDevice("k8s.compute-domain.gpudra.io/claim=c1-channel-1")
	require.NotNil(t, ch, "devices: %v", cache.ListDevices())
	require.Len(t, ch.ContainerEdits.DeviceNodes, 1)
	assert.Equal(t, ChannelPath(1), ch.ContainerEdits.DeviceNodes[0].Path)
	daemon := cache.GetDevice("k8s.compute-domain.gpudra.io/claim=d1-daemon-0")
	require.NotNil(t, daemon)
	assert.Contains(t, daemon.ContainerEdits.Env, "GPUDRA_DRIVER_ROOT=/driver-root")
	assert.Len(t, cache.ListDevices(), 2, "no spec for the failed claim")

	res, err := c.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "c1"}, {UID: "d1"}, {UID: "unknown"}})
	require.NoError(t, err)
	assert.Equal(t, map[types.UID]error{"c1": nil, "d1": nil, "unknown": nil}, res)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "the specs are removed")
	assert.NotContains(t, nodeLabels(t, client), label)
	assert.Empty(t, prepared(t, n))
}
