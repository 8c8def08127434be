package compat

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/test/chart"
	"github.com/gpudra/gpudra/test/crdschema"
)

// TestChartComputeDomainCRDs renders the chart's ComputeDomain CRDs in both
// modes: one per group and version the mode serves, each one the API server
// would accept, with NVIDIA's field names under NVIDIA's group, one schema
// for both, and kept on uninstall. (api/v1alpha1's tests check that schema
// against gpudra's validation.)
func TestChartComputeDomainCRDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		names Names
	}{
		{"native", nil, Default()},
		{"nvidia", []string{"--set", "compatibility=nvidia"}, MustResolve(Flags{Compatibility: "nvidia"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := chart.OfKind(chart.Render(t, append(tc.args, "--show-only", "templates/computedomains-crd.yaml")...),
				"CustomResourceDefinition")
			versions := tc.names.ComputeDomainVersions()
			require.Len(t, objs, len(versions))
			var gpudraSchema *apiextensionsv1.JSONSchemaProps
			schemas := map[string]*apiextensionsv1.JSONSchemaProps{}
			for _, o := range objs {
				data, err := json.Marshal(o)
				require.NoError(t, err)
				crd, err := crdschema.Parse(data)
				require.NoError(t, err)
				assert.Equal(t, "keep", crd.Annotations["helm.sh/resource-policy"], "%s: deleting the CRD would delete every ComputeDomain", crd.Name)
				require.Len(t, crd.Spec.Versions, 1)
				assert.Equal(t, v1alpha1.ComputeDomainResource+"."+crd.Spec.Group, crd.Name)
				assert.Equal(t, v1alpha1.ComputeDomainKind, crd.Spec.Names.Kind)
				assert.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope)
				version := crd.Spec.Versions[0].Name
				assert.Contains(t, versions, schema.GroupVersion{Group: crd.Spec.Group, Version: version}, "%s: a version the mode serves", crd.Name)
				var goType reflect.Type
				switch crd.Spec.Group + "/" + version {
				case v1alpha1.APIVersion:
					goType = reflect.TypeFor[v1alpha1.ComputeDomain]()
				case NVIDIAComputeDomains.String():
					goType = reflect.TypeFor[nvComputeDomain]()
				default:
					t.Fatalf("CRD %s serves %s/%s: no Go type to compare with", crd.Name, crd.Spec.Group, version)
				}
				s, err := crdschema.SchemaOf(crd, version)
				require.NoError(t, err)
				assert.Empty(t, s.CompareFields(goType), "fields of %s and %s", crd.Name, goType)
				schemas[crd.Name] = s.Props
				if crd.Spec.Group == v1alpha1.GroupName {
					gpudraSchema = s.Props
				}
			}
			require.NotNil(t, gpudraSchema, "gpudra's CRD is rendered in every mode")
			for name, props := range schemas {
				assert.Equal(t, gpudraSchema, props, "%s has gpudra's schema", name)
			}
		})
	}
	t.Run("installCRDs=false", func(t *testing.T) {
		objs := chart.Render(t, "--set", "computeDomains.installCRDs=false,compatibility=nvidia")
		assert.Empty(t, chart.OfKind(objs, "CustomResourceDefinition"))
	})
}
