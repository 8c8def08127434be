package claimconfig

import (
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// With passthrough on, a VfioDeviceConfig applies to vfio devices only and
// every vfio device gets a VFIO request (NVIDIA's defaults without one);
// off, the config fails the claim saying how to turn passthrough on.
func TestResolveVFIO(t *testing.T) {
	const (
		vfioAPI = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig","iommu":{"enableAPIDevice":true}}`
		vfioDev = "gpu-vfio-2"
	)
	on := compat.MustResolve(compat.Flags{Compatibility: "nvidia", Passthrough: true})
	off := compat.MustResolve(compat.Flags{Compatibility: "nvidia"})
	tests := []struct {
		name    string
		names   compat.Names
		results []resourceapi.DeviceRequestAllocationResult
		configs []resourceapi.DeviceAllocationConfiguration
		want    []*compat.VFIOConfig
		errHas  string
	}{
		{name: "a vfio device without config gets the defaults", names: on,
			results: []resourceapi.DeviceRequestAllocationResult{nv("vm", vfioDev)},
			want:    []*compat.VFIOConfig{{}}},
		{name: "a VfioDeviceConfig for all requests skips GPUs", names: on,
			results: []resourceapi.DeviceRequestAllocationResult{nv("c", "gpu-1"), nv("vm", vfioDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(vfioAPI)},
			want:    []*compat.VFIOConfig{nil, {APIDevice: true}}},
		{name: "a GpuConfig for all requests skips vfio devices", names: on,
			results: []resourceapi.DeviceRequestAllocationResult{nv("vm", vfioDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(vfioAPI), nvClaimConfig(nvSliced)},
			want:    []*compat.VFIOConfig{{APIDevice: true}}},
		{name: "a VfioDeviceConfig naming a GPU's request fails", names: on,
			results: []resourceapi.DeviceRequestAllocationResult{nv("c", "gpu-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(vfioAPI, "c")},
			errHas:  "use GpuConfig"},
		{name: "a GpuConfig naming a vfio request fails", names: on,
			results: []resourceapi.DeviceRequestAllocationResult{nv("vm", vfioDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvSliced, "vm")},
			errHas:  "use VfioDeviceConfig"},
		{name: "passthrough off", names: off,
			results: []resourceapi.DeviceRequestAllocationResult{nv("c", "gpu-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(vfioAPI)},
			errHas:  "kubeletPlugin.passthrough=true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(newClaim(tc.results, tc.configs...), tc.names, pool)
			if tc.errHas != "" {
				require.ErrorContains(t, err, tc.errHas)
				return
			}
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for i, w := range tc.want {
				require.Equal(t, w, got[i].VFIO, "device %s", got[i].Result.Device)
				require.NotNil(t, got[i].Config)
			}
		})
	}
}
