//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// classWithConfig is a DeviceClass selecting our GPUs with one opaque config.
func classWithConfig(t *testing.T, name, configDriver, params string) *resourceapi.DeviceClass {
	t.Helper()
	manifest := "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: " + name + "}\nspec:\n" +
		"  selectors:\n  - cel: {expression: 'device.driver == \"" + driver + "\"'}\n" +
		"  config:\n  - opaque:\n      driver: " + configDriver + "\n      parameters: " + params + "\n"
	c := &resourceapi.DeviceClass{}
	if err := yaml.UnmarshalStrict([]byte(manifest), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// testDeviceClassWebhook: the webhook refuses a DeviceClass whose config of
// our driver does not decode, at creation and at update. Every write is a
// server-side dry run: DeviceClasses are cluster-scoped, and other test
// processes share the cluster.
func testDeviceClassWebhook(t *testing.T) {
	// The chart names it after the controller (its Deployment's name).
	d, err := realCluster.ControllerDeployment(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), d.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(cfg.Webhooks[0].Rules, func(r admissionv1.RuleWithOperations) bool {
		return slices.Contains(r.Resources, "deviceclasses") && slices.Contains(r.Operations, admissionv1.Update)
	}) {
		t.Fatalf("%s has no rule for deviceclasses (CREATE, UPDATE): the chart must register the rules of "+
			"internal/controller/webhook/testdata/validatingwebhookconfiguration.yaml", d.Name)
	}
	ctx := context.Background()
	create := func(c *resourceapi.DeviceClass) error {
		_, err := client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{DryRun: dryRun})
		return err
	}

	err = create(classWithConfig(t, "bad.e2e.gpudra.io", driver, badParams))
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("creating a DeviceClass with bad parameters: want a 400 from the webhook, got %v", err)
	}
	for _, want := range []string{`admission webhook "claimparameters.gpu.gpudra.io" denied`, "DeviceClass bad.e2e.gpudra.io",
		"spec.config[0] (every request for this class)", "sharing.strategy", `"Exclusive", "TimeSlicing"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the class's rejection should contain %q: %v", want, err)
		}
	}
	if err := create(classWithConfig(t, "good.e2e.gpudra.io", driver, goodParams)); err != nil {
		t.Errorf("a DeviceClass with good parameters must be accepted: %v", err)
	}
	if err := create(classWithConfig(t, "other.e2e.gpudra.io", "example.com", `{anything: [goes, here]}`)); err != nil {
		t.Errorf("a DeviceClass with another driver's config must be accepted: %v", err)
	}

	// Update: adding a bad config to the class the controller keeps.
	waitClass(t, "gpu.gpudra.io", true)
	bad := classWithConfig(t, "x", driver, badParams).Spec.Config
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := client.ResourceV1().DeviceClasses().Get(ctx, "gpu.gpudra.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Spec.Config = append(c.Spec.Config, bad...)
		_, err = client.ResourceV1().DeviceClasses().Update(ctx, c, metav1.UpdateOptions{DryRun: dryRun})
		return err
	})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "DeviceClass gpu.gpudra.io: spec.config[") {
		t.Errorf("adding bad parameters to DeviceClass gpu.gpudra.io: want a 400 from the webhook, got %v", err)
	}
	// An update that leaves the configs alone passes.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := client.ResourceV1().DeviceClasses().Get(ctx, "gpu.gpudra.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, "gpudra.io/e2e", "touched")
		_, err = client.ResourceV1().DeviceClasses().Update(ctx, c, metav1.UpdateOptions{DryRun: dryRun})
		return err
	})
	if err != nil {
		t.Errorf("an annotation-only update of DeviceClass gpu.gpudra.io must be accepted: %v", err)
	}
}
