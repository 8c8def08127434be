package deviceclass

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// With passthrough the controller keeps a third base class whose selector
// takes vfio devices and nothing else; without, the base classes are as
// before.
func TestPassthroughClass(t *testing.T) {
	tests := []struct {
		name   string
		flags  compat.Flags
		want   []string
		driver string
	}{
		{"native, off", compat.Flags{}, []string{"gpu.gpudra.io", "mig.gpudra.io"}, "gpu.gpudra.io"},
		{"native, on", compat.Flags{Passthrough: true}, []string{"gpu.gpudra.io", "mig.gpudra.io", "vfio.gpu.gpudra.io"}, "gpu.gpudra.io"},
		{"nvidia, on", compat.Flags{Compatibility: "nvidia", Passthrough: true},
			[]string{"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"}, "gpu.nvidia.com"},
	}
	compiler := cel.GetCompiler(cel.Features{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			classes := BaseClassesFor(compat.MustResolve(tc.flags), "nvidia.com/gpu")
			var names []string
			for _, c := range classes {
				names = append(names, c.Name)
			}
			require.Equal(t, tc.want, names)
			if len(classes) < 3 {
				return
			}
			v := classes[2]
			require.Nil(t, v.Spec.ExtendedResourceName, "nvidia.com/gpu pods never get a VM's GPU")
			result := compiler.CompileCELExpression(v.Spec.Selectors[0].CEL.Expression, cel.Options{})
			require.Nil(t, result.Error)
			for typ, want := range map[string]bool{"vfio": true, "gpu": false, "mig": false} {
				got, _, err := result.DeviceMatches(t.Context(), device(tc.driver, map[string]string{"type": typ}))
				require.NoError(t, err)
				require.Equal(t, want, got, "type %s", typ)
			}
		})
	}
}
