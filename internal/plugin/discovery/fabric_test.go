package discovery

import (
	"context"
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/sim"
)

const rack = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44"

// fabricDevice is a mock GPU that also answers the versioned fabric call.
type fabricDevice struct {
	*mock.Device
	v func(version uint32) (nvml.GpuFabricInfo_v3, nvml.Return)
}

func (d fabricDevice) GpuFabricInfoV(version uint32) (nvml.GpuFabricInfo_v3, nvml.Return) {
	return d.v(version)
}

// fabricLib is fakeLib's GPU with the given fabric answers: v1 for
// nvmlDeviceGetGpuFabricInfo, v for ...InfoV (nil: the library lacks it).
func fabricLib(v1 func() (nvml.GpuFabricInfo, nvml.Return), v func(uint32) (nvml.GpuFabricInfo_v3, nvml.Return)) noRoot {
	lib := fakeLib("", nvml.ERROR_NOT_SUPPORTED)
	dev, _ := lib.DeviceGetHandleByIndex(0)
	md := dev.(*mock.Device)
	if v1 != nil {
		md.GetGpuFabricInfoFunc = v1
	}
	if v != nil {
		lib.ExtensionsFunc = func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		}
		fd := fabricDevice{Device: md, v: v}
		lib.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return fd, nvml.SUCCESS }
	}
	return noRoot{lib}
}

func v3(state uint8, cluster string, clique uint32, status nvml.Return, mask uint32) nvml.GpuFabricInfo_v3 {
	var id [16]uint8
	if cluster != "" {
		id = uuid.MustParse(cluster)
	}
	return nvml.GpuFabricInfo_v3{ClusterUuid: id, CliqueId: clique, State: state, Status: uint32(status), HealthMask: mask}
}

// healthy is a mask that reports every kept condition as not holding;
// degraded the same with degraded bandwidth.
const (
	healthy  = 2<<0 | 2<<2 | 2<<4 | 2<<6
	degraded = 1<<0 | 2<<2 | 2<<4 | 2<<6
)

func answer(info nvml.GpuFabricInfo_v3, ret nvml.Return) func(uint32) (nvml.GpuFabricInfo_v3, nvml.Return) {
	return func(version uint32) (nvml.GpuFabricInfo_v3, nvml.Return) {
		if version != nvml.STRUCT_VERSION(nvml.GpuFabricInfo_v2{}, 2) {
			return nvml.GpuFabricInfo_v3{}, nvml.ERROR_ARGUMENT_VERSION_MISMATCH
		}
		info.Version = version
		return info, ret
	}
}

func unversioned(info nvml.GpuFabricInfo_v3, ret nvml.Return) func() (nvml.GpuFabricInfo, nvml.Return) {
	return func() (nvml.GpuFabricInfo, nvml.Return) {
		return nvml.GpuFabricInfo{ClusterUuid: info.ClusterUuid, CliqueId: info.CliqueId, State: info.State, Status: info.Status}, ret
	}
}

// TestDiscoverFabric: what discovery makes of NVML's fabric answers. Only a
// GPU whose registration completed without error in a multi-node fabric
// (non-zero cluster UUID) has a clique; NOT_SUPPORTED means no fabric; an
// unexpected error leaves the fabric out but keeps the GPU; a lost GPU is
// unavailable.
func TestDiscoverFabric(t *testing.T) {
	completed := v3(nvml.GPU_FABRIC_STATE_COMPLETED, rack, 7, nvml.SUCCESS, degraded)
	tests := []struct {
		name        string
		v1          func() (nvml.GpuFabricInfo, nvml.Return)
		v           func(uint32) (nvml.GpuFabricInfo_v3, nvml.Return)
		want        *model.Fabric
		clique      string
		unavailable bool
	}{
		{name: "no fabric (L4, A100, H100 PCIe)", want: nil},
		{name: "no fabric, versioned call", v: answer(nvml.GpuFabricInfo_v3{}, nvml.ERROR_NOT_SUPPORTED), want: nil},
		{name: "completed, with health", v: answer(completed, nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricCompleted, ClusterUUID: rack, CliqueID: 7, Health: map[string]bool{
				model.FabricDegradedBandwidth: true, model.FabricRouteRecovery: false, model.FabricRouteUnhealthy: false,
				model.FabricAccessTimeoutRecovery: false}},
			clique: rack + ".7"},
		{name: "completed, driver without the versioned call", v1: unversioned(completed, nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricCompleted, ClusterUUID: rack, CliqueID: 7}, clique: rack + ".7"},
		{name: "versioned call refuses the v2 struct: the unversioned answer",
			v: func(uint32) (nvml.GpuFabricInfo_v3, nvml.Return) {
				return nvml.GpuFabricInfo_v3{}, nvml.ERROR_ARGUMENT_VERSION_MISMATCH
			},
			v1:   unversioned(v3(nvml.GPU_FABRIC_STATE_COMPLETED, rack, 8, nvml.SUCCESS, 0), nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricCompleted, ClusterUUID: rack, CliqueID: 8}, clique: rack + ".8"},
		{name: "in progress: no cluster, no clique, whatever NVML fills in",
			v: answer(v3(nvml.GPU_FABRIC_STATE_IN_PROGRESS, rack, 7, nvml.ERROR_UNKNOWN, healthy), nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricInProgress, Health: map[string]bool{model.FabricDegradedBandwidth: false,
				model.FabricRouteRecovery: false, model.FabricRouteUnhealthy: false, model.FabricAccessTimeoutRecovery: false}}},
		{name: "not started", v1: unversioned(v3(nvml.GPU_FABRIC_STATE_NOT_STARTED, "", 0, nvml.SUCCESS, 0), nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricNotStarted}},
		{name: "state not supported", v1: unversioned(v3(nvml.GPU_FABRIC_STATE_NOT_SUPPORTED, "", 0, nvml.SUCCESS, 0), nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricNotSupported}},
		{name: "completed with an error", v1: unversioned(v3(nvml.GPU_FABRIC_STATE_COMPLETED, rack, 7, nvml.ERROR_TIMEOUT, 0), nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricCompleted, ClusterUUID: rack, CliqueID: 7, Error: ReturnError(nvml.ERROR_TIMEOUT).Error()}},
		{name: "completed, single-node NVLink (zero cluster UUID)",
			v1:   unversioned(v3(nvml.GPU_FABRIC_STATE_COMPLETED, "", 0, nvml.SUCCESS, 0), nvml.SUCCESS),
			want: &model.Fabric{State: model.FabricCompleted}},
		{name: "a state NVML adds later", v1: unversioned(v3(9, "", 0, nvml.SUCCESS, 0), nvml.SUCCESS),
			want: &model.Fabric{State: "state-9"}},
		{name: "health fields the driver does not report are absent",
			v:      answer(v3(nvml.GPU_FABRIC_STATE_COMPLETED, rack, 1, nvml.SUCCESS, 1<<4), nvml.SUCCESS),
			want:   &model.Fabric{State: model.FabricCompleted, ClusterUUID: rack, CliqueID: 1, Health: map[string]bool{model.FabricRouteUnhealthy: true}},
			clique: rack + ".1"},
		{name: "unexpected error: published without fabric", v1: unversioned(completed, nvml.ERROR_UNKNOWN), want: nil},
		{name: "lost GPU", v: answer(completed, nvml.ERROR_GPU_IS_LOST), unavailable: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node, err := Discover(context.Background(), fabricLib(tc.v1, tc.v), Options{})
			require.NoError(t, err)
			if tc.unavailable {
				require.Empty(t, node.GPUs)
				require.Len(t, node.Unavailable, 1)
				require.ErrorIs(t, node.Unavailable[0].Err, nvml.ERROR_GPU_IS_LOST)
				require.ErrorContains(t, node.Unavailable[0].Err, "fabric")
				return
			}
			require.Len(t, node.GPUs, 1)
			g := node.GPUs[0]
			assert.Equal(t, tc.want, g.Fabric)
			assert.Equal(t, tc.clique, g.Fabric.Clique())
			assert.Equal(t, tc.clique != "", g.Fabric.Attached())
		})
	}
}

// TestDiscoverFabricFromSimulatedProfiles: the same through the simulator,
// per profile: the GB200 tray's GPUs share one clique, GPUs without a
// fabric have none, and the states a tray's entry sets come through.
func TestDiscoverFabricFromSimulatedProfiles(t *testing.T) {
	tray := func(driver, fabric string) string {
		return fmt.Sprintf("name: tray\ndriverVersion: %q\ncudaDriverVersion: \"12.8\"\ngpus:\n  - {model: gb200, count: 2, fabric: %s}\n", driver, fabric)
	}
	entry := "{clusterUUID: " + rack + ", cliqueID: 2"
	tests := []struct {
		name, profile string
		state         model.FabricState
		clique        string
		health        map[string]bool
	}{
		{profile: "gb200-nvl72-tray", state: model.FabricCompleted, clique: rack + ".1", health: map[string]bool{
			model.FabricDegradedBandwidth: false, model.FabricRouteRecovery: false, model.FabricRouteUnhealthy: false,
			model.FabricAccessTimeoutRecovery: false}},
		{profile: "l4"},
		{profile: "dgx-a100"},
		{profile: "dgx-h100"},
		{name: "tray in progress", profile: tray("580.82.07", entry+", state: in-progress}"), state: model.FabricInProgress, health: map[string]bool{
			model.FabricDegradedBandwidth: false, model.FabricRouteRecovery: false, model.FabricRouteUnhealthy: false,
			model.FabricAccessTimeoutRecovery: false}},
		{name: "tray with degraded bandwidth", profile: tray("580.82.07", entry+", health: [degraded-bandwidth]}"), state: model.FabricCompleted, clique: rack + ".2",
			health: map[string]bool{model.FabricDegradedBandwidth: true, model.FabricRouteRecovery: false,
				model.FabricRouteUnhealthy: false, model.FabricAccessTimeoutRecovery: false}},
		{name: "tray on R535 (no health)", profile: tray("535.183.01", entry+"}"), state: model.FabricCompleted, clique: rack + ".2"},
	}
	for _, tc := range tests {
		name := tc.name
		if name == "" {
			name = tc.profile
		}
		t.Run(name, func(t *testing.T) {
			var p *sim.Profile
			var err error
			if tc.name != "" {
				p, err = sim.Parse([]byte(tc.profile))
			} else {
				p, err = sim.Load(tc.profile, nil)
			}
			require.NoError(t, err)
			for _, g := range discoverSimulated(t, p).GPUs {
				if tc.state == "" {
					assert.Nil(t, g.Fabric, "GPU %d", g.Index)
					continue
				}
				require.NotNil(t, g.Fabric, "GPU %d", g.Index)
				assert.Equal(t, tc.state, g.Fabric.State)
				assert.Equal(t, tc.clique, g.Fabric.Clique())
				assert.Equal(t, tc.health, g.Fabric.Health)
			}
		})
	}
}

// TestDiscoverFabricLooksUpSymbols: a call to a function the library lacks
// kills the process, so a library without the fabric calls (a driver older
// than Hopper support) is never asked: the GPU has no fabric.
func TestDiscoverFabricLooksUpSymbols(t *testing.T) {
	lib := fakeLib("", nvml.ERROR_NOT_SUPPORTED)
	lib.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(sym string) error {
			if sym == fabricInfoSymbol || sym == fabricInfoVSymbol {
				return fmt.Errorf("undefined symbol: %s", sym)
			}
			return nil
		}}
	}
	dev, _ := lib.DeviceGetHandleByIndex(0)
	dev.(*mock.Device).GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		t.Error("nvmlDeviceGetGpuFabricInfo called on a library without it")
		return nvml.GpuFabricInfo{}, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	node, err := Discover(context.Background(), noRoot{lib}, Options{})
	require.NoError(t, err)
	require.Len(t, node.GPUs, 1)
	require.Nil(t, node.GPUs[0].Fabric)
}

// discoverSimulated discovers the GPUs of a simulated node of profile p,
// through the simulator in process; the node has at least one.
func discoverSimulated(t *testing.T, p *sim.Profile) *model.Node {
	t.Helper()
	srv := sim.NewServer(p, "node-a")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	node, err := Discover(context.Background(), srv, Options{})
	require.NoError(t, err)
	require.NotEmpty(t, node.GPUs)
	return node
}

// TestFabricReader: a fabric read again on a running node (through the
// simulator, whose fabric changes at runtime) is what a fresh discovery
// reads for the same NVML answers; a GPU that does not answer is an error,
// never a fabric.
func TestFabricReader(t *testing.T) {
	p, err := sim.Load("gb200-nvl72-tray", nil)
	require.NoError(t, err)
	srv := sim.NewServer(p, "node-a")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	node, err := Discover(context.Background(), srv, Options{})
	require.NoError(t, err)
	id := node.GPUs[0].UUID
	require.True(t, FabricCapable(node.GPUs[0].Fabric))
	r := NewFabricReader(srv)
	inProgress, completed := nvml.GpuFabricState(nvml.GPU_FABRIC_STATE_IN_PROGRESS), nvml.GpuFabricState(nvml.GPU_FABRIC_STATE_COMPLETED)
	clique := uint32(5)
	for _, tc := range []struct {
		name     string
		override *sim.FabricOverride
		clique   string
		degraded *bool
	}{
		{name: "profile", clique: rack + ".1", degraded: new(false)},
		{name: "in progress", override: &sim.FabricOverride{State: &inProgress}, degraded: new(false)},
		{name: "failed", override: &sim.FabricOverride{State: &completed, Status: nvml.ERROR_TIMEOUT}, degraded: new(false)},
		{name: "clique", override: &sim.FabricOverride{CliqueID: &clique}, clique: rack + ".5", degraded: new(false)},
		{name: "degraded", override: &sim.FabricOverride{Health: []string{"degraded-bandwidth"}}, clique: rack + ".1", degraded: new(true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.override != nil {
				require.NoError(t, srv.SetFabricOverride(id, *tc.override))
			} else {
				require.NoError(t, srv.ClearFabric(id))
			}
			got, err := r.Read(context.Background(), id)
			require.NoError(t, err)
			fresh, err := Discover(context.Background(), srv, Options{})
			require.NoError(t, err)
			assert.Equal(t, fresh.GPUs[0].Fabric, got, "as a fresh discovery")
			assert.Equal(t, tc.clique, got.Clique())
			d, ok := got.Health[model.FabricDegradedBandwidth]
			assert.Equal(t, tc.degraded != nil, ok)
			if tc.degraded != nil {
				assert.Equal(t, *tc.degraded, d)
			}
		})
	}
	require.NoError(t, srv.SetLost(id, true))
	_, err = r.Read(context.Background(), id)
	require.ErrorIs(t, err, nvml.ERROR_GPU_IS_LOST)
	_, err = r.Read(context.Background(), "GPU-none")
	require.Error(t, err)
	assert.False(t, FabricCapable(nil))
	assert.False(t, FabricCapable(&model.Fabric{State: model.FabricNotSupported}))
}
