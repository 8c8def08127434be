package claimconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

const (
	nvSliced = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
	nvMPS    = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`
	migDev   = "gpu-0-mig-1g10gb-0"
)

func nvClaimConfig(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return config(resourceapi.AllocationConfigSourceClaim, compat.NVIDIADriverName, params, requests...)
}

func nv(request, device string) resourceapi.DeviceRequestAllocationResult {
	return result(request, compat.NVIDIADriverName, pool, device)
}

// In the NVIDIA mode a GpuConfig applies to whole GPUs and a MigDeviceConfig
// to MIG devices; a configuration for all requests skips the other kind, one
// that names a request of the other kind fails the claim.
func TestResolveNVIDIAKinds(t *testing.T) {
	mps := v1alpha1.DefaultGpuClaimParameters()
	mps.Sharing = &v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &v1alpha1.MpsConfig{}}
	def := v1alpha1.DefaultGpuClaimParameters()
	tests := []struct {
		name    string
		results []resourceapi.DeviceRequestAllocationResult
		configs []resourceapi.DeviceAllocationConfiguration
		want    []*v1alpha1.GpuClaimParameters
		errHas  string
	}{
		{name: "configs for all requests pick their kind",
			results: []resourceapi.DeviceRequestAllocationResult{nv("a", "gpu-1"), nv("b", migDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvSliced), nvClaimConfig(nvMPS)},
			want:    []*v1alpha1.GpuClaimParameters{sliced(v1alpha1.LongTimeSlice), mps}},
		{name: "a later GpuConfig does not hide a MigDeviceConfig from MIG devices",
			results: []resourceapi.DeviceRequestAllocationResult{nv("b", migDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvMPS), nvClaimConfig(nvSliced)},
			want:    []*v1alpha1.GpuClaimParameters{mps}},
		{name: "no config of the device's kind is the default",
			results: []resourceapi.DeviceRequestAllocationResult{nv("b", migDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvSliced)},
			want:    []*v1alpha1.GpuClaimParameters{def}},
		{name: "gpudra's parameters apply to both kinds",
			results: []resourceapi.DeviceRequestAllocationResult{nv("a", "gpu-1"), nv("b", migDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(long)},
			want:    []*v1alpha1.GpuClaimParameters{sliced(v1alpha1.LongTimeSlice), sliced(v1alpha1.LongTimeSlice)}},
		{name: "a GpuConfig naming a MIG request fails",
			results: []resourceapi.DeviceRequestAllocationResult{nv("b", migDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvSliced, "b")},
			errHas:  "a GpuConfig (request \"b\") cannot be applied to device gpu-0-mig-1g10gb-0"},
		{name: "a MigDeviceConfig naming a GPU request fails",
			results: []resourceapi.DeviceRequestAllocationResult{nv("a", "gpu-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvMPS, "a")},
			errHas:  "use GpuConfig"},
		// NVIDIA's driver (at 9593204) matches request names exactly, so a
		// config naming "gpu" misses a "gpu/large" result there and the GPU
		// gets the default; the resource.k8s.io API says a main request
		// covers its subrequests, which gpudra follows in both modes.
		{name: "a GpuConfig naming a main request applies to its subrequests (prioritized list)",
			results: []resourceapi.DeviceRequestAllocationResult{nv("gpu/large", "gpu-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvSliced, "gpu")},
			want:    []*v1alpha1.GpuClaimParameters{sliced(v1alpha1.LongTimeSlice)}},
		{name: "a MigDeviceConfig naming a subrequest applies to it only",
			results: []resourceapi.DeviceRequestAllocationResult{nv("mig/small", migDev), nv("other/small", "gpu-0-mig-1g10gb-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvMPS, "mig/small")},
			want:    []*v1alpha1.GpuClaimParameters{mps, def}},
		{name: "a GpuConfig naming a main request skips a MIG device of its subrequest (either may be allocated)",
			results: []resourceapi.DeviceRequestAllocationResult{nv("gpu/mig", migDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvMPS, "gpu"), nvClaimConfig(nvSliced, "gpu")},
			want:    []*v1alpha1.GpuClaimParameters{mps}},
		{name: "a GpuConfig naming a MIG subrequest fails",
			results: []resourceapi.DeviceRequestAllocationResult{nv("gpu/mig", migDev)},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(nvSliced, "gpu/mig")},
			errHas:  `a GpuConfig (request "gpu/mig") cannot be applied to device gpu-0-mig-1g10gb-0 of request "gpu/mig"`},
		{name: "unsupported kinds are named",
			results: []resourceapi.DeviceRequestAllocationResult{nv("a", "gpu-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{nvClaimConfig(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`)},
			errHas:  "VfioDeviceConfig is not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(newClaim(tc.results, tc.configs...), compat.MustResolve(compat.Flags{Compatibility: "nvidia"}), pool)
			if tc.errHas != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.errHas)
				return
			}
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for i := range got {
				assert.Equal(t, tc.want[i], got[i].Config, "device %s", got[i].Result.Device)
			}
		})
	}
}

// Natively, NVIDIA's configurations are rejected as before.
func TestResolveNativeRejectsNVIDIAConfig(t *testing.T) {
	_, err := Resolve(newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("a", "gpu-1")}, fromClaim(nvSliced)), native, pool)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "GpuClaimParameters")
}
