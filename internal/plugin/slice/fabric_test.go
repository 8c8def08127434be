package slice_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// trayCluster is the cluster UUID of the built-in GB200 tray profile.
const trayCluster = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44"

// TestFabricAttributes: a GPU publishes cliqueID only when attached to a
// multi-node NVLink fabric, and fabricBandwidthDegraded only where NVML
// reports that health field; both names are the same in the NVIDIA
// compatibility mode; MIG devices carry neither.
func TestFabricAttributes(t *testing.T) {
	health := func(degraded bool) map[string]bool {
		return map[string]bool{model.FabricDegradedBandwidth: degraded, model.FabricRouteUnhealthy: false}
	}
	tests := []struct {
		name     string
		fabric   *model.Fabric // nil: as discovered
		noFabric bool          // NVML reports no fabric
		clique   string        // "" when absent
		degraded *bool         // nil when absent
	}{
		{name: "as discovered on the GB200 tray", clique: trayCluster + ".1", degraded: new(false)},
		{name: "degraded bandwidth", fabric: &model.Fabric{State: model.FabricCompleted, ClusterUUID: trayCluster, CliqueID: 3,
			Health: health(true)}, clique: trayCluster + ".3", degraded: new(true)},
		{name: "registration in progress", fabric: &model.Fabric{State: model.FabricInProgress, Health: health(false)}, degraded: new(false)},
		{name: "not started, no health", fabric: &model.Fabric{State: model.FabricNotStarted}},
		{name: "completed with an error", fabric: &model.Fabric{State: model.FabricCompleted, ClusterUUID: trayCluster, CliqueID: 3,
			Error: "ERROR_TIMEOUT"}},
		{name: "single-node NVLink", fabric: &model.Fabric{State: model.FabricCompleted}},
		{name: "driver without the health mask", fabric: &model.Fabric{State: model.FabricCompleted, ClusterUUID: trayCluster,
			CliqueID: 9}, clique: trayCluster + ".9"},
		{name: "health without the degraded-bandwidth field", fabric: &model.Fabric{State: model.FabricCompleted,
			ClusterUUID: trayCluster, CliqueID: 9, Health: map[string]bool{model.FabricRouteUnhealthy: true}}, clique: trayCluster + ".9"},
		{name: "no fabric", noFabric: true},
	}
	for _, tc := range tests {
		for _, nvidia := range []bool{false, true} {
			name := tc.name
			if nvidia {
				name += ", NVIDIA compatibility"
			}
			t.Run(name, func(t *testing.T) {
				node := simNode(t, "gb200-nvl72-tray", "n1")
				switch {
				case tc.noFabric:
					node.GPUs[0].Fabric = nil
				case tc.fabric != nil:
					node.GPUs[0].Fabric = tc.fabric
				}
				res, err := slice.Resources("n1", node, slice.Options{NVIDIAAttributes: nvidia})
				require.NoError(t, err)
				d := res.Pools["n1"].Slices[0].Devices[0]
				require.Equal(t, "gpu-0", d.Name)
				if tc.clique == "" {
					assert.NotContains(t, d.Attributes, slice.AttrCliqueID)
				} else {
					require.Contains(t, d.Attributes, slice.AttrCliqueID)
					assert.Equal(t, tc.clique, *d.Attributes[slice.AttrCliqueID].StringValue)
				}
				if tc.degraded == nil {
					assert.NotContains(t, d.Attributes, slice.AttrFabricBandwidthDegraded)
				} else {
					require.Contains(t, d.Attributes, slice.AttrFabricBandwidthDegraded)
					assert.Equal(t, *tc.degraded, *d.Attributes[slice.AttrFabricBandwidthDegraded].BoolValue)
				}
			})
		}
	}
}

func TestFabricAttributesNotOnMIGDevices(t *testing.T) {
	node := simNode(t, "gb200-nvl72-tray", "n1")
	mig.Apply(node, mig.ModeDynamic)
	devices, err := slice.Devices(node)
	require.NoError(t, err)
	migs := 0
	for _, d := range devices {
		if *d.Attributes[slice.AttrType].StringValue == slice.DeviceTypeGPU {
			assert.Contains(t, d.Attributes, slice.AttrCliqueID, d.Name)
			continue
		}
		migs++
		assert.NotContains(t, d.Attributes, slice.AttrCliqueID, d.Name)
		assert.NotContains(t, d.Attributes, slice.AttrFabricBandwidthDegraded, d.Name)
	}
	require.NotZero(t, migs)
}

// TestCliqueAllocation runs the scheduler's allocator: a selector on
// cliqueID picks GPUs of that clique only, and GPUs without a fabric never
// satisfy a matchAttribute on it.
func TestCliqueAllocation(t *testing.T) {
	slices := cluster(t, map[string]string{"gb200-a": "gb200-nvl72-tray", "gpu-h100": "dgx-h100"})
	const (
		clique    = "gpu.gpudra.io/cliqueID"
		inClique1 = `device.attributes["gpu.gpudra.io"].cliqueID == "` + trayCluster + `.1"`
		anyClique = `has(device.attributes["gpu.gpudra.io"].cliqueID)`
	)
	tests := []struct {
		name      string
		node      string
		req       request
		wantCount int
	}{
		{name: "the tray's 4 GPUs in one clique", node: "gb200-a", req: request{count: 4, matchAttrs: []string{clique}}, wantCount: 4},
		{name: "2 GPUs of clique 1", node: "gb200-a", req: request{count: 2, selector: inClique1}, wantCount: 2},
		{name: "no clique on an HGX H100", node: "gpu-h100", req: request{count: 1, selector: anyClique}},
		{name: "matchAttribute on cliqueID needs a clique", node: "gpu-h100", req: request{count: 2, matchAttrs: []string{clique}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			results := allocate(t, slices, tc.node, sets.New[structured.DeviceID](), gpuClaim("c", tc.req))
			require.Len(t, results, tc.wantCount)
			for _, r := range results {
				require.Equal(t, trayCluster+".1", attrOf(slices, r, slice.AttrCliqueID))
			}
		})
	}
}

// TestAddressingModeAttribute: NVML's addressing mode is published as
// addressingMode, NVIDIA's name and values, on GPUs and (the parent's) on
// their MIG devices; absent where NVML reports none.
func TestAddressingModeAttribute(t *testing.T) {
	for profile, want := range map[string]string{"gb200-nvl72-tray": "ATS", "dgx-h100": ""} {
		t.Run(profile, func(t *testing.T) {
			node := simNode(t, profile, "n1")
			mig.Apply(node, mig.ModeDynamic)
			devices, err := slice.Devices(node)
			require.NoError(t, err)
			for _, d := range devices {
				if want == "" {
					assert.NotContains(t, d.Attributes, slice.AttrAddressingMode, d.Name)
					continue
				}
				require.Contains(t, d.Attributes, slice.AttrAddressingMode, d.Name)
				assert.Equal(t, want, *d.Attributes[slice.AttrAddressingMode].StringValue, d.Name)
			}
		})
	}
}
