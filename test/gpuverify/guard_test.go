package gpuverify

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

const (
	testDriver = "gpu.gpudra.io"
	testPool   = "verify-node"
)

func guardNode() *model.Node {
	return &model.Node{GPUs: []model.GPU{{Minor: 0, UUID: "GPU-0"}, {Minor: 1, UUID: "GPU-1", Partitioning: model.StaticMIG}}}
}

func withConfig(c *resourceapi.ResourceClaim, params string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
		Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: testDriver, Parameters: runtime.RawExtension{Raw: []byte(params)}}},
	}}
	return c
}

func TestGuardClaim(t *testing.T) {
	yes := true
	share := types.UID("share-1")
	tests := []struct {
		name   string
		modify func(c *resourceapi.ResourceClaim)
		want   string // substring of the refusal; empty: allowed
	}{
		{name: "exclusive whole GPU"},
		{name: "GPU in MIG mode", modify: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Device = "gpu-1" },
			want: "gpu-1 is not a GPU published whole"},
		{name: "MIG device", modify: func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].Device = "gpu-1-mig-1g10gb-0"
		}, want: "is not a GPU published whole"},
		{name: "configuration", modify: func(c *resourceapi.ResourceClaim) { withConfig(c, `{}`) }, want: "carries a device configuration"},
		{name: "admin access", modify: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].AdminAccess = &yes },
			want: "not allocated exclusively"},
		{name: "share", modify: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].ShareID = &share },
			want: "not allocated exclusively"},
		{name: "other pool", modify: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Pool = "node-b" },
			want: "is not this node's"},
		{name: "not allocated", modify: func(c *resourceapi.ResourceClaim) { c.Status.Allocation = nil }, want: "no allocated device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := allocatedClaim("c", testDriver, testPool, "gpu", "gpu-0")
			if tc.modify != nil {
				tc.modify(c)
			}
			err := guardClaim(c, testDriver, testPool, guardNode())
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errReadOnly)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestManagerRefusesSharing: even a claim that got past the guard could not
// change a GPU setting through the kit's Manager.
func TestManagerRefusesSharing(t *testing.T) {
	r := newSimRun(t, "l4")
	_, ctx := ktesting.NewTestContext(t)
	k := &kit{cfg: r.cfg, names: compat.MustResolve(compat.Flags{Driver: r.cfg.DriverName}), r: &Report{}}
	node := k.inspect(ctx)
	require.NotNil(t, node)
	defer k.shutdown()
	s := k.r.section("test")
	p := k.newPreparer(ctx, s, node)
	require.NotNil(t, p, "%+v", s.Entries)
	defer func() { require.NoError(t, os.RemoveAll(p.dirs.root)) }()
	tests := []struct {
		name, sharing, want string
		attempts            int64
	}{
		{"time slicing", `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`, "read-only on GPU settings", 1},
		{"MPS", `{"strategy":"MPS"}`, "MPS is not available", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := withConfig(allocatedClaim("shared", testDriver, testPool, "gpu", "gpu-0"),
				`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":`+tc.sharing+`}`)
			res := p.m.PrepareClaims(ctx, []*resourceapi.ResourceClaim{c})[c.UID]
			require.ErrorContains(t, res.Err, tc.want)
			require.Equal(t, tc.attempts, p.slicer.attempts.Load())
			has, err := p.writer.HasClaim(string(c.UID))
			require.NoError(t, err)
			require.False(t, has, "no CDI spec for a refused claim")
		})
	}
}
