package gpuverify

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/sim"
)

// TestPluginSlicesPass: what internal/plugin/slice builds for the built-in profiles,
// static and dynamic MIG, passes the checks.
func TestPluginSlicesPass(t *testing.T) {
	for _, profile := range sim.Builtin() {
		for _, mode := range []mig.Mode{mig.ModeStatic, mig.ModeDynamic} {
			t.Run(fmt.Sprintf("%s/%s", profile, mode), func(t *testing.T) {
				p, err := sim.Load(profile, nil)
				require.NoError(t, err)
				s := sim.NewServer(p, "node-a")
				require.Equal(t, nvml.SUCCESS, s.Init())
				defer func() { _ = s.Shutdown() }()
				node, err := discovery.Discover(context.Background(), s, discovery.Options{})
				require.NoError(t, err)
				mig.Apply(node, mode)
				res, err := slice.Resources("node-a", node, sliceOptions)
				require.NoError(t, err)
				require.Empty(t, checkSlices("gpu.gpudra.io", slice.Objects("gpu.gpudra.io", "node-a", res)))
			})
		}
	}
}

func TestCheckSlices(t *testing.T) {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	dev := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": str("GPU-1")}}
	}
	one := func(devs ...resourceapi.Device) []resourceapi.ResourceSlice {
		return []resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{
			Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1}, Devices: devs}}}
	}
	many := func(n int, counters bool) []resourceapi.Device {
		out := make([]resourceapi.Device, n)
		for i := range out {
			out[i] = dev(fmt.Sprintf("gpu-%d", i))
			if counters {
				out[i].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-mig"}}
			}
		}
		return out
	}
	tooMany := dev("gpu-0")
	for i := range 32 {
		tooMany.Attributes[resourceapi.QualifiedName(fmt.Sprintf("a%d", i))] = str("x")
	}
	twoValues := dev("gpu-0")
	yes := true
	twoValues.Attributes["both"] = resourceapi.DeviceAttribute{StringValue: twoValues.Attributes["uuid"].StringValue, BoolValue: &yes}
	withAttr := func(name, value string) resourceapi.Device {
		d := dev("gpu-0")
		d.Attributes[resourceapi.QualifiedName(name)] = str(value)
		return d
	}
	tests := []struct {
		name   string
		driver string
		slices []resourceapi.ResourceSlice
		want   string // substring of the problems; empty: none
	}{
		{name: "valid", slices: one(dev("gpu-0"), dev("gpu-1"))},
		{name: "128 plain devices", slices: one(many(128, false)...)},
		{name: "129 devices", slices: one(many(129, false)...), want: "129 devices, the API allows 128"},
		{name: "65 devices with counters", slices: one(many(65, true)...), want: "65 devices, the API allows 64"},
		{name: "device name not a DNS label", slices: one(dev("GPU_0")), want: "device GPU_0: name is not a DNS label"},
		{name: "duplicate device", slices: one(dev("gpu-0"), dev("gpu-0")), want: "gpu-0 appears twice"},
		{name: "too many attributes", slices: one(tooMany), want: "33 attributes and capacities, the API allows 32"},
		{name: "value too long", slices: one(withAttr("productName", strings.Repeat("x", 65))), want: "longer than 64 characters"},
		{name: "attribute ID too long", slices: one(withAttr(strings.Repeat("a", 33), "x")), want: "is not a C identifier of at most 32"},
		{name: "attribute ID not an identifier", slices: one(withAttr("pci-bus", "x")), want: `"pci-bus" is not a C identifier`},
		{name: "qualified attribute", slices: one(withAttr("resource.kubernetes.io/pcieRoot", "pci0000:00"))},
		{name: "bad attribute domain", slices: one(withAttr("Not_A_Domain/x", "y")), want: `domain "Not_A_Domain"`},
		{name: "two values", slices: one(twoValues), want: "attribute both has 2 values"},
		{name: "bad driver name", driver: "GPU Driver", slices: one(dev("gpu-0")), want: `driver name "GPU Driver"`},
		{
			name: "slice count mismatch",
			slices: []resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{
				Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 2}}}},
			want: "resourceSliceCount 2, but the pool has 1 slices",
		},
		{
			name: "too many counter sets",
			slices: []resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{
				Pool:           resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
				SharedCounters: make([]resourceapi.CounterSet, 9)}}},
			want: "9 counter sets, the API allows 8",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			driver := tc.driver
			if driver == "" {
				driver = "gpu.gpudra.io"
			}
			got := strings.Join(checkSlices(driver, tc.slices), "\n")
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
}
