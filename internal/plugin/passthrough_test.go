package plugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/plugin/vfio"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/chart"
	"github.com/gpudra/gpudra/test/fakedriver"
)

func TestValidatePassthrough(t *testing.T) {
	tests := []struct {
		name, shares string
		on           bool
		wantErr      string
		wantClass    string
	}{
		{name: "off"},
		{name: "on", on: true, wantClass: compat.NativeVFIOClass},
		{name: "on with consumable shares", on: true, shares: "memory", wantErr: "--passthrough cannot be combined with --consumable-shares=memory"},
		{name: "off with consumable shares", shares: "memory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{NodeName: "n", MaxDevicesPerSlice: 128, MIG: "static", ConsumableShares: tc.shares, Passthrough: tc.on}
			err := o.Validate()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.on, o.sliceOptions().Passthrough)
			require.Equal(t, tc.wantClass, o.names.VFIOClass)
			require.Equal(t, tc.on, o.passthrough(nil, false) != nil)
			require.Equal(t, tc.on, len(o.metadataOptions()) > 0, "device metadata comes with passthrough")
		})
	}
}

// TestChartPassthrough: kubeletPlugin.passthrough reaches the plugin as
// --passthrough (parsed by the plugin's own flags), the controller gets it
// too, the chart's own classes (no controller) get the vfio class, and an
// unprivileged plugin is refused.
func TestChartPassthrough(t *testing.T) {
	tests := []struct {
		name           string
		set            string
		wantPlugin     bool
		wantController bool
		wantClass      string
		wantErr        string
	}{
		{name: "default: off", set: "compatibility="},
		{name: "on", set: "kubeletPlugin.passthrough=true", wantPlugin: true, wantController: true},
		{name: "on, NVIDIA names, no controller", set: "compatibility=nvidia,kubeletPlugin.passthrough=true,controller.enabled=false",
			wantPlugin: true, wantClass: compat.NVIDIAVFIOClass},
		{name: "unprivileged", set: "kubeletPlugin.passthrough=true,kubeletPlugin.privileged=false", wantErr: "needs kubeletPlugin.privileged"},
		{name: "NVIDIA's feature gate", set: "compatibility=nvidia,featureGates.PassthroughSupport=true,featureGates.DeviceMetadata=true",
			wantPlugin: true, wantController: true},
		{name: "NVIDIA's gate off", set: "featureGates.PassthroughSupport=false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := chart.RenderErr(t, "--set", tc.set)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			plugins := chartPluginOptions(t, objs)
			require.NotEmpty(t, plugins)
			for name, opts := range plugins {
				require.Equal(t, tc.wantPlugin, opts.Passthrough, "gpudra-kubelet-plugin"+name)
			}
			gotController := false
			for _, o := range chart.OfKind(objs, "Deployment") {
				d := &appsv1.Deployment{}
				require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, d))
				gotController = gotController || slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--passthrough")
			}
			require.Equal(t, tc.wantController, gotController)
			var classes []string
			for _, o := range chart.OfKind(objs, "DeviceClass") {
				classes = append(classes, o["metadata"].(map[string]any)["name"].(string))
			}
			if tc.wantClass != "" {
				require.Contains(t, classes, tc.wantClass)
			} else {
				require.NotContains(t, classes, compat.NativeVFIOClass)
				require.NotContains(t, classes, compat.NVIDIAVFIOClass)
			}
		})
	}
}

// TestPassthroughRoots: the plugin finds a driver root's sysfs and
// /dev/vfio as it finds its other /sys and /dev files (nvmllib.Roots), and
// names the nodes as the host sees them.
func TestPassthroughRoots(t *testing.T) {
	root := fakedriver.ForTest(t, "dgx-h100", "node-a")
	o := &Options{NodeName: "n", MaxDevicesPerSlice: 128, MIG: "static", Passthrough: true,
		NvidiaDriverRoot: root, HostDriverRoot: "/var/lib/gpudra-sim/driver-root"}
	require.NoError(t, o.Validate())
	p := o.passthrough(nil, false)
	require.NotNil(t, p)
	require.Equal(t, vfio.HostSysfs{Root: filepath.Join(root, "sys")}, p.Sysfs)
	entries, err := os.ReadDir(filepath.Join(root, "proc/driver/nvidia/gpus"))
	require.NoError(t, err)
	addr := entries[0].Name()
	d, err := p.Sysfs.Driver(addr)
	require.NoError(t, err)
	require.Equal(t, vfio.DriverNVIDIA, d)
	group, err := p.Sysfs.IOMMUGroup(addr)
	require.NoError(t, err)
	nodes, err := vfio.DeviceNodes(p.Dev, p.HostDev, vfio.Nodes{Group: group})
	require.NoError(t, err)
	require.Equal(t, "/var/lib/gpudra-sim/driver-root"+vfio.GroupPath(group), nodes[0].HostPath)
}

// TestDetectIOMMUFD: the plugin finds /dev/iommu where it finds /dev/vfio
// (the driver root's dev), only with passthrough on.
func TestDetectIOMMUFD(t *testing.T) {
	root := fakedriver.ForTest(t, "dgx-h100", "node-a")
	for _, tc := range []struct {
		name        string
		passthrough bool
		iommu       bool
		want        bool
	}{
		{name: "passthrough, no /dev/iommu", passthrough: true},
		{name: "passthrough, /dev/iommu", passthrough: true, iommu: true, want: true},
		{name: "passthrough off, /dev/iommu", iommu: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.iommu {
				require.NoError(t, fakedriver.EnableIOMMUFD(root))
				t.Cleanup(func() { require.NoError(t, os.Remove(filepath.Join(root, vfio.IOMMUPath))) })
			}
			o := &Options{NodeName: "n", MaxDevicesPerSlice: 128, MIG: "static", Passthrough: tc.passthrough, NvidiaDriverRoot: root}
			require.NoError(t, o.Validate())
			node := &model.Node{}
			require.NoError(t, o.detectIOMMUFD(context.Background(), node))
			require.Equal(t, tc.want, node.IOMMUFD)
		})
	}
}

// The health monitor skips exactly the GPUs whose vfio device a claim
// holds, and only with passthrough on.
func TestPassedThrough(t *testing.T) {
	node := &model.Node{GPUs: []model.GPU{{Minor: 0, UUID: "GPU-a"}, {Minor: 1, UUID: "GPU-b"}, {Minor: 2, UUID: "GPU-c", MIGEnabled: true}}}
	store, err := checkpoint.Open(checkpoint.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, store.AddHolder("gpu-vfio-1", checkpoint.Holder{ClaimUID: "11111111-2222-3333-4444-555555555555", Claim: "default/vm", Access: "exclusive"}))
	require.NoError(t, store.AddHolder("gpu-0", checkpoint.Holder{ClaimUID: "21111111-2222-3333-4444-555555555555", Claim: "default/ctr", Access: "exclusive"}))
	prepared := prepare.NewPrepared(store)

	off := &Options{}
	require.Nil(t, off.passedThrough(node, prepared))
	on := &Options{Passthrough: true}
	skip := on.passedThrough(node, prepared)
	for uuid, want := range map[string]bool{"GPU-a": false, "GPU-b": true, "GPU-c": false, "GPU-unknown": false} {
		require.Equal(t, want, skip(uuid), uuid)
	}
}
