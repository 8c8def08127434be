package plugin

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"
)

// --compatibility=nvidia makes the plugin gpu.nvidia.com: its slices, its
// data directory (socket, checkpoint) and NVIDIA's attributes.
func TestCompatibilityNVIDIA(t *testing.T) {
	o := testOptions(t)
	o.Compatibility = "nvidia"
	require.NoError(t, o.Validate())
	require.Equal(t, "gpu.nvidia.com", o.DriverName)
	require.Equal(t, filepath.Join(o.KubeletPluginsDir, "gpu.nvidia.com"), o.PluginDataDir())

	_, ctx := ktesting.NewTestContext(t)
	ins, err := Inspect(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "gpu.nvidia.com", ins.ResourceSlices[0].Spec.Driver)
	for _, d := range ins.ResourceSlices[0].Spec.Devices {
		require.NotContains(t, d.Attributes, resourceapi.QualifiedName("pcieBusID"), d.Name)
		require.NotNil(t, d.Attributes["resource.kubernetes.io/pciBusID"].StringValue, d.Name)
	}

	// MIG devices carry NVIDIA's names, with the GPU instance profile ID.
	for _, tc := range []struct {
		compatibility string
		name          *regexp.Regexp
	}{
		{"nvidia", regexp.MustCompile(`^gpu-\d+-mig-[a-z0-9-]+-\d+-\d+$`)},
		{"", regexp.MustCompile(`^gpu-\d+-mig-[a-z0-9]+-\d+$`)},
	} {
		o = testOptions(t)
		o.Compatibility, o.MIG = tc.compatibility, "dynamic"
		ins, err = Inspect(ctx, o)
		require.NoError(t, err)
		migs := 0
		for _, s := range ins.ResourceSlices {
			for _, d := range s.Spec.Devices {
				if p := d.Attributes["profile"].StringValue; p != nil {
					migs++
					require.Regexp(t, tc.name, d.Name, "profile %s", *p)
				}
			}
		}
		require.Positive(t, migs, "compatibility %q", tc.compatibility)
	}

	o = testOptions(t)
	o.Compatibility, o.DriverName = "nvidia", "gpu.example.com"
	require.ErrorContains(t, o.Validate(), "--driver-name")
	o = testOptions(t)
	o.Compatibility = "amd"
	require.ErrorContains(t, o.Validate(), "--compatibility")

	// Natively nothing changes.
	o = testOptions(t)
	ins, err = Inspect(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "gpu.gpudra.io", ins.ResourceSlices[0].Spec.Driver)
	require.NotContains(t, ins.ResourceSlices[0].Spec.Devices[0].Attributes, "pcieBusID")
}
