package deviceclass

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// In the NVIDIA compatibility mode the classes are NVIDIA's names and select
// devices of gpu.nvidia.com only; natively nothing changes.
func TestClassesPerMode(t *testing.T) {
	nv := compat.MustResolve(compat.Flags{Compatibility: "nvidia"})
	for _, tc := range []struct {
		names            compat.Names
		gpu, mig, model  string
		ownGPU, otherGPU cel.Device
	}{
		{compat.Default(), "gpu.gpudra.io", "mig.gpudra.io", "h100-80gb-hbm3.gpu.gpudra.io",
			device("gpu.gpudra.io", map[string]string{"type": "gpu", "productName": "NVIDIA H100 80GB HBM3"}),
			device("gpu.nvidia.com", map[string]string{"type": "gpu", "productName": "NVIDIA H100 80GB HBM3"})},
		{nv, "gpu.nvidia.com", "mig.nvidia.com", "h100-80gb-hbm3.gpu.nvidia.com",
			device("gpu.nvidia.com", map[string]string{"type": "gpu", "productName": "NVIDIA H100 80GB HBM3"}),
			device("gpu.gpudra.io", map[string]string{"type": "gpu", "productName": "NVIDIA H100 80GB HBM3"})},
	} {
		t.Run(tc.names.Driver, func(t *testing.T) {
			classes := BaseClassesFor(tc.names, "nvidia.com/gpu")
			require.Len(t, classes, 2)
			assert.Equal(t, tc.gpu, classes[0].Name)
			assert.Equal(t, "nvidia.com/gpu", *classes[0].Spec.ExtendedResourceName)
			assert.Equal(t, tc.mig, classes[1].Name)
			model, err := modelClassFor(tc.names, "NVIDIA H100 80GB HBM3")
			require.NoError(t, err)
			assert.Equal(t, tc.model, model.Name)
			assert.True(t, isModelClassName(tc.names, model.Name))
			assert.False(t, isModelClassName(tc.names, tc.gpu))

			compiler := cel.GetCompiler(cel.Features{})
			for _, c := range append(classes[:1], model) {
				expr := c.Spec.Selectors[0].CEL.Expression
				result := compiler.CompileCELExpression(expr, cel.Options{})
				require.Nil(t, result.Error, "compile %s", expr)
				own, _, err := result.DeviceMatches(t.Context(), tc.ownGPU)
				require.NoError(t, err)
				other, _, err := result.DeviceMatches(t.Context(), tc.otherGPU)
				require.NoError(t, err)
				assert.True(t, own, "%s selects the driver's GPU", c.Name)
				assert.False(t, other, "%s selects the other driver's GPU", c.Name)
			}
		})
	}
	assert.Equal(t, BaseClasses("x"), BaseClassesFor(compat.Default(), "x"), "the native classes are unchanged")

	profile, err := migProfileClassFor(nv, "1g.10gb", "nvidia.com/mig-")
	require.NoError(t, err)
	assert.Equal(t, "1g.10gb.mig.nvidia.com", profile.Name)
	assert.Contains(t, profile.Spec.Selectors[0].CEL.Expression, `device.attributes["gpu.nvidia.com"].profile == "1g.10gb"`)
	assert.True(t, isProfileClassName(nv, profile.Name))
	assert.False(t, isProfileClassName(compat.Default(), profile.Name))
}
