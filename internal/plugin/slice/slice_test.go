package slice_test

import (
	"context"
	"flag"
	"fmt"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const driverName = "gpu.gpudra.io"

// simNode discovers a simulated node exactly as the plugin does.
func simNode(t testing.TB, profile, nodeName string) *model.Node {
	t.Helper()
	p, err := sim.Load(profile, nil)
	require.NoError(t, err)
	server := sim.NewServer(p, nodeName)
	require.Equal(t, nvml.SUCCESS, server.Init())
	t.Cleanup(func() { _ = server.Shutdown() })
	node, err := discovery.Discover(context.Background(), server, discovery.Options{})
	require.NoError(t, err)
	return node
}

// TestGoldenSlices pins the ResourceSlice content of every built-in profile.
// After an intended change: go test ./internal/plugin/slice -run TestGoldenSlices -update
func TestGoldenSlices(t *testing.T) {
	type golden struct {
		profile, file string
		mode          mig.Mode
	}
	var cases []golden
	for _, profile := range sim.Builtin() {
		cases = append(cases, golden{profile, profile, mig.ModeStatic})
	}
	cases = append(cases, golden{"mixed", "mixed.dynamic-mig", mig.ModeDynamic},
		golden{"testdata/static-mig.yaml", "static-mig", mig.ModeStatic})
	for _, tc := range cases {
		profile := tc.file
		t.Run(profile, func(t *testing.T) {
			node := simNode(t, tc.profile, "golden-node")
			mig.Apply(node, tc.mode)
			res, err := slice.Resources("golden-node", node, slice.Options{})
			require.NoError(t, err)
			got, err := yaml.Marshal(slice.Objects(driverName, "golden-node", res))
			require.NoError(t, err)
			path := filepath.Join("testdata", profile+".golden.yaml")
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "missing golden file; run with -update")
			require.Equal(t, string(want), string(got))
		})
	}
}

func TestDeviceAttributes(t *testing.T) {
	tests := []struct {
		profile string
		count   int
		product string
		arch    string
		cc      string
		memory  string
		migCap  bool
		hasNUMA bool
		modules bool // an 8-GPU baseboard: gpuModuleID 1..8
	}{
		{"dgx-a100", 8, "NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", "40Gi", true, true, true},
		{"dgx-h100", 8, "NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "80Gi", true, true, true},
		{"h200", 4, "NVIDIA H200", "Hopper", "9.0.0", "", true, true, false},
		{"l4", 2, "NVIDIA L4", "Ada Lovelace", "8.9.0", "23034Mi", false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			node := simNode(t, tc.profile, "n1")
			devices, err := slice.Devices(node)
			require.NoError(t, err)
			require.Len(t, devices, tc.count)
			for i, d := range devices {
				require.Equal(t, fmt.Sprintf("gpu-%d", node.GPUs[i].Minor), d.Name)
				a := d.Attributes
				require.Equal(t, "gpu", *a["type"].StringValue)
				require.Equal(t, tc.product, *a["productName"].StringValue)
				require.Equal(t, tc.arch, *a["architecture"].StringValue)
				require.Equal(t, tc.cc, *a["cudaComputeCapability"].VersionValue)
				require.Equal(t, node.GPUs[i].UUID, *a["uuid"].StringValue)
				require.True(t, strings.HasPrefix(*a["uuid"].StringValue, "GPU-"))
				require.NotNil(t, a["driverVersion"].VersionValue)
				require.NotNil(t, a["cudaDriverVersion"].VersionValue)
				require.Equal(t, int64(node.GPUs[i].Index), *a["index"].IntValue)
				require.Equal(t, int64(node.GPUs[i].Minor), *a["minor"].IntValue)
				require.Equal(t, tc.migCap, *a["migCapable"].BoolValue)
				require.Equal(t, node.GPUs[i].PCIBusID, *a["resource.kubernetes.io/pciBusID"].StringValue)
				require.NotEmpty(t, *a["resource.kubernetes.io/pcieRoot"].StringValue)
				if tc.modules {
					require.Equal(t, int64(i+1), *a["gpuModuleID"].IntValue)
				} else {
					require.NotContains(t, a, resourceapi.QualifiedName("gpuModuleID"))
				}
				_, numa := a["resource.kubernetes.io/numaNode"]
				require.Equal(t, tc.hasNUMA, numa)
				if tc.memory != "" {
					got := d.Capacity["memory"].Value
					require.Zero(t, got.Cmp(resource.MustParse(tc.memory)), got.String())
				}
				require.LessOrEqual(t, len(d.Attributes)+len(d.Capacity), resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
			}
		})
	}
}

func TestStableUUIDsPerNode(t *testing.T) {
	a1, a2, b := simNode(t, "dgx-h100", "a"), simNode(t, "dgx-h100", "a"), simNode(t, "dgx-h100", "b")
	for i := range a1.GPUs {
		require.Equal(t, a1.GPUs[i].UUID, a2.GPUs[i].UUID, "same node, same UUIDs across restarts")
		require.NotEqual(t, a1.GPUs[i].UUID, b.GPUs[i].UUID, "different nodes, different UUIDs")
	}
}

// TestSplitting checks the API limit of devices per slice.
func TestSplitting(t *testing.T) {
	mk := func(n int) []resourceapi.Device {
		d := make([]resourceapi.Device, n)
		for i := range d {
			d[i].Name = fmt.Sprintf("gpu-%d", i)
		}
		return d
	}
	tests := []struct {
		devices, max int
		wantSlices   []int
	}{
		{0, 0, []int{0}},
		{8, 0, []int{8}},
		{128, 0, []int{128}},
		{129, 0, []int{128, 1}},
		{300, 0, []int{128, 128, 44}},
		{130, 64, []int{64, 64, 2}},
		{10, 500, []int{10}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d-devices-max-%d", tc.devices, tc.max), func(t *testing.T) {
			res := slice.Pack("node", mk(tc.devices), slice.Options{MaxDevicesPerSlice: tc.max})
			pool := res.Pools["node"]
			var sizes []int
			seen := map[string]bool{}
			for _, s := range pool.Slices {
				sizes = append(sizes, len(s.Devices))
				for _, d := range s.Devices {
					require.False(t, seen[d.Name], "device %s in two slices", d.Name)
					seen[d.Name] = true
				}
			}
			require.Equal(t, tc.wantSlices, sizes)
			require.Len(t, seen, tc.devices)
			objs := slice.Objects(driverName, "node", res)
			for _, o := range objs {
				require.Equal(t, int64(len(pool.Slices)), o.Spec.Pool.ResourceSliceCount)
			}
		})
	}
}

func TestSemver(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{"9.0", "9.0.0", ""},
		{"12.4", "12.4.0", ""},
		{"550.54.15", "550.54.15", ""},
		{"535.104.05", "535.104.5", ""},
		{"8", "8.0.0", ""},
		{"", "", "not of the form"},
		{"1.2.3.4", "", "not of the form"},
		{"12.x", "", "not a number"},
	}
	for _, tc := range tests {
		got, err := slice.Semver(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestAttributeValueTooLong(t *testing.T) {
	node := &model.Node{DriverVersion: "550.54.15", CUDADriverVersion: "12.4", GPUs: []model.GPU{{
		UUID: "GPU-x", ProductName: strings.Repeat("x", 65), CUDAComputeCapability: "9.0", PCIBusID: "0000:01:00.0",
	}}}
	_, err := slice.Resources("n", node, slice.Options{})
	require.ErrorContains(t, err, "longer than the API's 64 characters")
}
