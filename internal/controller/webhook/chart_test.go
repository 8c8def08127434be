package webhook

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/chart"
)

// TestChartWebhookRules renders the chart's ValidatingWebhookConfiguration
// in both modes: natively its rules are those of the recommended
// configuration, and in every mode its computedomains rules cover, for
// create and update, exactly the groups and versions the mode serves.
func TestChartWebhookRules(t *testing.T) {
	data, err := os.ReadFile("testdata/validatingwebhookconfiguration.yaml")
	require.NoError(t, err)
	var recommended admissionregistrationv1.ValidatingWebhookConfiguration
	require.NoError(t, yaml.UnmarshalStrict(data, &recommended))

	for _, tc := range []struct {
		name  string
		args  []string
		names compat.Names
	}{
		{"native", nil, compat.Default()},
		{"nvidia", []string{"--set", "compatibility=nvidia"}, compat.MustResolve(compat.Flags{Compatibility: "nvidia"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := chart.Render(t, append(tc.args, "--show-only", "templates/controller/webhook.yaml")...)
			require.Len(t, objs, 1)
			raw, err := json.Marshal(objs[0])
			require.NoError(t, err)
			var cfg admissionregistrationv1.ValidatingWebhookConfiguration
			require.NoError(t, json.Unmarshal(raw, &cfg))
			require.Len(t, cfg.Webhooks, 1)
			rules := cfg.Webhooks[0].Rules
			if tc.names.Mode == compat.Native {
				assert.Equal(t, recommended.Webhooks[0].Rules, rules, "the chart's rules are the recommended ones")
			}
			var covered []schema.GroupVersion
			for _, r := range rules {
				if !slices.Contains(r.Resources, "computedomains") {
					continue
				}
				assert.Equal(t, []string{"computedomains"}, r.Resources)
				assert.ElementsMatch(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, r.Operations)
				for _, g := range r.APIGroups {
					for _, v := range r.APIVersions {
						covered = append(covered, schema.GroupVersion{Group: g, Version: v})
					}
				}
			}
			assert.ElementsMatch(t, tc.names.ComputeDomainVersions(), covered)
		})
	}
}
