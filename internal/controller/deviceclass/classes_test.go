package deviceclass

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

func TestClassNameForProduct(t *testing.T) {
	long := "NVIDIA " + strings.Repeat("Very Long Model Name ", 5)
	tests := []struct {
		product string
		want    string
		wantErr bool
	}{
		{product: "NVIDIA H100 80GB HBM3", want: "h100-80gb-hbm3.gpu.gpudra.io"},
		{product: "NVIDIA A100-SXM4-40GB", want: "a100-sxm4-40gb.gpu.gpudra.io"},
		{product: "NVIDIA L4", want: "l4.gpu.gpudra.io"},
		{product: "NVIDIA H200", want: "h200.gpu.gpudra.io"},
		{product: "Tesla V100-SXM2-16GB", want: "tesla-v100-sxm2-16gb.gpu.gpudra.io"},
		{product: "  nvidia  GeForce RTX 4090 ", want: "geforce-rtx-4090.gpu.gpudra.io"},
		{product: "NVIDIA RTX PRO 6000 Blackwell Server Edition", want: "rtx-pro-6000-blackwell-server-edition.gpu.gpudra.io"},
		{product: `NVIDIA "Quoted" \ Model__X`, want: "quoted-model-x.gpu.gpudra.io"},
		{product: "NVIDIA", want: "nvidia.gpu.gpudra.io"},
		{product: long, want: "very-long-model-name-very-long-model-name-very-long-mo-6b01f6af.gpu.gpudra.io"},
		{product: "", wantErr: true},
		{product: "NVIDIA ---", wantErr: true},
		{product: "ÄÖÜ", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.product, func(t *testing.T) {
			got, err := ClassNameForProduct(tc.product)
			if tc.wantErr {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "no letters or digits")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			label, _, _ := strings.Cut(got, ".")
			assert.LessOrEqual(t, len(label), validation.DNS1123LabelMaxLength)
			assert.Empty(t, validation.IsDNS1123Subdomain(got))
			assert.True(t, isModelClassName(compat.Default(), got))
		})
	}
	a, err := ClassNameForProduct(long + "A")
	require.NoError(t, err)
	b, err := ClassNameForProduct(long + "B")
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "shortened names stay unique")
}

func device(driver string, attrs map[string]string) cel.Device {
	d := cel.Device{Driver: driver, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	for k, v := range attrs {
		d.Attributes[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
	}
	return d
}

// TestSelectorsCompileAndMatch compiles every selector with the DRA CEL
// compiler the scheduler uses and evaluates it against devices.
func TestSelectorsCompileAndMatch(t *testing.T) {
	odd := `NVIDIA "Odd" \Name` + "\t" + `ü`
	h100 := device("gpu.gpudra.io", map[string]string{"type": "gpu", "productName": "NVIDIA H100 80GB HBM3"})
	oddGPU := device("gpu.gpudra.io", map[string]string{"type": "gpu", "productName": odd})
	qualified := device("gpu.gpudra.io", map[string]string{"gpu.gpudra.io/type": "gpu", "gpu.gpudra.io/productName": "NVIDIA H100 80GB HBM3"})
	mig := device("gpu.gpudra.io", map[string]string{"type": "mig", "productName": "NVIDIA H100 80GB HBM3"})
	other := device("other.example.com", map[string]string{"type": "gpu", "productName": "NVIDIA H100 80GB HBM3"})

	tests := []struct {
		name     string
		expr     string
		device   cel.Device
		expected bool
	}{
		{"gpu class, gpu", BaseSelector("gpu"), h100, true},
		{"gpu class, qualified attributes", BaseSelector("gpu"), qualified, true},
		{"gpu class, mig", BaseSelector("gpu"), mig, false},
		{"gpu class, other driver", BaseSelector("gpu"), other, false},
		{"mig class, mig", BaseSelector("mig"), mig, true},
		{"mig class, gpu", BaseSelector("mig"), h100, false},
		{"model class, same model", ModelSelector("NVIDIA H100 80GB HBM3"), h100, true},
		{"model class, other model", ModelSelector("NVIDIA H100 80GB HBM3"), oddGPU, false},
		{"model class, mig of the model", ModelSelector("NVIDIA H100 80GB HBM3"), mig, false},
		{"model class with quotes and backslash", ModelSelector(odd), oddGPU, true},
		{"model class with quotes, other model", ModelSelector(odd), h100, false},
	}
	compiler := cel.GetCompiler(cel.Features{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			result := compiler.CompileCELExpression(tc.expr, cel.Options{})
			require.Nil(t, result.Error, "compile %s", tc.expr)
			got, _, err := result.DeviceMatches(t.Context(), tc.device)
			require.NoError(t, err)
			assert.Equal(t, tc.expected, got)
		})
	}
}

// TestStaticClassMatchesBase keeps deployments/static (used without the
// controller) and the controller's gpu class identical.
func TestStaticClassMatchesBase(t *testing.T) {
	data, err := os.ReadFile("../../../deployments/static/deviceclasses.yaml")
	require.NoError(t, err)
	var static resourceapi.DeviceClass
	require.NoError(t, yaml.UnmarshalStrict(data, &static))
	want := BaseClasses("nvidia.com/gpu")[0]
	assert.Equal(t, want.Name, static.Name)
	assert.True(t, apiequality.Semantic.DeepEqual(want.Spec, static.Spec), "static %+v\ncontroller %+v", static.Spec, want.Spec)
}

func TestNeedsUpdate(t *testing.T) {
	desired := BaseClasses("nvidia.com/gpu")[0]
	edited := desired.DeepCopy()
	edited.Spec.Selectors[0].CEL.Expression = "true"
	unlabelled := desired.DeepCopy()
	unlabelled.Labels = nil
	noERN := desired.DeepCopy()
	noERN.Spec.ExtendedResourceName = nil
	extraLabel := desired.DeepCopy()
	extraLabel.Labels["team"] = "ml"

	tests := []struct {
		name      string
		existing  *resourceapi.DeviceClass
		ignoreERN bool
		want      bool
	}{
		{"same", desired, false, false},
		{"extra labels are kept", extraLabel, false, false},
		{"edited selector", edited, false, true},
		{"missing label", unlabelled, false, true},
		{"missing extendedResourceName", noERN, false, true},
		{"missing extendedResourceName, server drops it", noERN, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, needsUpdate(tc.existing, desired, tc.ignoreERN))
			m := merged(tc.existing, desired)
			assert.False(t, needsUpdate(m, desired, false), "merged is up to date")
		})
	}
}
