package webhook

import (
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// TestRecommendedWebhookConfiguration checks that the shipped configuration
// is a valid object and keeps the failure policy documented in doc.go.
func TestRecommendedWebhookConfiguration(t *testing.T) {
	data, err := os.ReadFile("testdata/validatingwebhookconfiguration.yaml")
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, admissionregistrationv1.AddToScheme(scheme))
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	obj, _, err := decoder.Decode(data, nil, nil)
	require.NoError(t, err, "strict decoding")
	cfg, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	require.True(t, ok, "got %T", obj)

	require.Len(t, cfg.Webhooks, 1)
	wh := cfg.Webhooks[0]
	assert.Equal(t, ptr.To(admissionregistrationv1.Ignore), wh.FailurePolicy, "a down webhook must not block claims")
	assert.Equal(t, ptr.To(int32(5)), wh.TimeoutSeconds)
	assert.Equal(t, ptr.To(admissionregistrationv1.SideEffectClassNone), wh.SideEffects)
	assert.Equal(t, ptr.To(admissionregistrationv1.Equivalent), wh.MatchPolicy)
	assert.Equal(t, []string{"v1"}, wh.AdmissionReviewVersions, "the handler only reads admission.k8s.io/v1")

	require.NotNil(t, wh.NamespaceSelector)
	excludesKubeSystem := slices.ContainsFunc(wh.NamespaceSelector.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool {
		return r.Key == "kubernetes.io/metadata.name" && r.Operator == "NotIn" && slices.Contains(r.Values, "kube-system")
	})
	assert.True(t, excludesKubeSystem, "namespaceSelector must exclude kube-system")

	require.NotNil(t, wh.ClientConfig.Service)
	assert.Equal(t, ptr.To(Path), wh.ClientConfig.Service.Path)

	require.Len(t, wh.Rules, 3)
	claims, classes, domains := wh.Rules[0], wh.Rules[1], wh.Rules[2]
	assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, claims.Operations,
		"device specs are immutable; checking updates could only block finalizer removal")
	assert.Equal(t, []string{resourceGroup}, claims.APIGroups)
	assert.ElementsMatch(t, SupportedVersions, claims.APIVersions)
	assert.ElementsMatch(t, []string{"resourceclaims", "resourceclaimtemplates"}, claims.Resources)
	assert.Equal(t, ptr.To(admissionregistrationv1.NamespacedScope), claims.Scope)

	assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		classes.Operations, "a DeviceClass's config can be edited after creation")
	assert.Equal(t, []string{resourceGroup}, classes.APIGroups)
	assert.ElementsMatch(t, SupportedVersions, classes.APIVersions)
	assert.Equal(t, []string{"deviceclasses"}, classes.Resources)
	assert.Equal(t, ptr.To(admissionregistrationv1.ClusterScope), classes.Scope)

	assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		domains.Operations, "an update must not change a ComputeDomain's spec")
	assert.Equal(t, []string{v1alpha1.GroupName}, domains.APIGroups)
	assert.Equal(t, []string{v1alpha1.Version}, domains.APIVersions)
	assert.Equal(t, []string{v1alpha1.ComputeDomainResource}, domains.Resources)
	assert.Equal(t, ptr.To(admissionregistrationv1.NamespacedScope), domains.Scope)
}
