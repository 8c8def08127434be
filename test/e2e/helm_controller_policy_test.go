//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/controller/deviceclass"
)

// TestHelmControllerAdmissionPolicy installs the controller's
// ServiceAccount, RBAC and ValidatingAdmissionPolicies from the chart (under
// a release name of its own, removed afterwards) and acts as that
// ServiceAccount: its RBAC lets it create any DeviceClass and any Secret in
// its namespace, the policies confine it to the classes it writes, its
// certificate Secret and the DaemonSets of ComputeDomains, its Role's patch
// on pods to the one annotation of its IMEX daemon pods (the -pods policy;
// internal/controller/computedomain's TestChartConfinesNudges checks the
// admitted changes offline). Every write is a dry run.
func TestHelmControllerAdmissionPolicy(t *testing.T) {
	skipWithoutHelm(t)
	ns := namespace(t)
	release := fmt.Sprintf("cvap%05d", rand.IntN(100000))
	name := release + "-gpudra-controller"
	var objs []*unstructured.Unstructured
	for _, o := range helmTemplate(t, release, ns) {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if strings.HasPrefix(o.GetName(), name) {
				objs = append(objs, o)
			}
		}
	}
	if len(objs) != 13 {
		t.Fatalf("found %d controller RBAC and policy objects, want 13 (ServiceAccount, two roles and bindings, "+
			"four policies and bindings)", len(objs))
	}
	path := writeList(t, objs)
	if out, err := kubectl("apply", "-f", path); err != nil {
		t.Fatalf("install the controller's RBAC and policies: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "--wait=false", "-f", path) })
	classPolicy, secretPolicy, domainPolicy := name+"-deviceclasses", name+"-secrets", name+"-computedomains"
	waitPolicyTypeChecked(t, classPolicy)
	waitPolicyTypeChecked(t, secretPolicy)
	waitPolicyTypeChecked(t, domainPolicy)
	waitPolicyTypeChecked(t, name+"-pods")

	c := impersonate(t, "system:serviceaccount:"+ns+":"+name, "")
	other := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: release + ".example.com",
		Labels: map[string]string{deviceclass.ManagedByLabel: deviceclass.ManagedByValue}},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.example.com"`}}}}}
	// The policy takes a moment to be enforced after it is created.
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) { return isPolicyDenial(createClass(c, other)), nil })
	if err != nil {
		t.Fatalf("creating DeviceClass %s as the controller was never denied by %s", other.Name, classPolicy)
	}

	// A per-model class as the controller writes it, of a made-up model
	// (its name is free).
	model, err := deviceclass.ModelClass("NVIDIA E2E " + release)
	if err != nil {
		t.Fatal(err)
	}
	widened := model.DeepCopy()
	widened.Spec.Selectors[0].CEL.Expression += ` || true`
	unlabelled := model.DeepCopy()
	unlabelled.Labels = nil
	existing := gpuClass(t)
	for _, tc := range []struct {
		name    string
		err     error
		allowed bool
	}{
		{"create a per-model class", createClass(c, model), true},
		{"create another driver's class", createClass(c, other), false},
		{"create a per-model class that selects every device", createClass(c, widened), false},
		{"create a class without the managed-by label", createClass(c, unlabelled), false},
		{"update the GPU class into another driver's", updateClass(c, existing, func(d *resourceapi.DeviceClass) {
			d.Spec.Selectors[0].CEL.Expression = `device.driver == "gpu.example.com"`
		}), false},
		{"update the GPU class with opaque config", updateClass(c, existing, func(d *resourceapi.DeviceClass) {
			d.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}}}
		}), false},
		{"create the certificate Secret", createSecret(c, ns, release+"-gpudra-webhook-tls", corev1.SecretTypeTLS, nil), true},
		{"create another Secret", createSecret(c, ns, "other", corev1.SecretTypeOpaque, nil), false},
		{"mint a ServiceAccount token", createSecret(c, ns, "token", corev1.SecretTypeServiceAccountToken,
			map[string]string{corev1.ServiceAccountNameKey: "default"}), false},
		// Its RBAC lets it create DaemonSets in its namespace; the policy
		// admits only the IMEX DaemonSets of ComputeDomains
		// (internal/controller/computedomain's TestChartMatchesController
		// checks the admitted shapes offline).
		{"create a DaemonSet that is not a ComputeDomain's", createDaemonSet(c, ns, "other"), false},
	} {
		switch {
		case tc.allowed && tc.err != nil:
			t.Errorf("%s: refused: %v", tc.name, tc.err)
		case !tc.allowed && !isPolicyDenial(tc.err):
			t.Errorf("%s: want a denial by %s, %s or %s, got %v", tc.name, classPolicy, secretPolicy, domainPolicy, tc.err)
		}
	}
}

// gpuClass is the installed chart's GPU DeviceClass.
func gpuClass(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"gpu.gpudra.io", "gpu.nvidia.com"} {
		if _, err := client.ResourceV1().DeviceClasses().Get(context.Background(), n, metav1.GetOptions{}); err == nil {
			return n
		}
	}
	t.Fatal("no GPU DeviceClass installed")
	return ""
}

func createClass(c kubernetes.Interface, d *resourceapi.DeviceClass) error {
	_, err := c.ResourceV1().DeviceClasses().Create(context.Background(), d, metav1.CreateOptions{DryRun: dryRun})
	return err
}

func updateClass(c kubernetes.Interface, name string, edit func(*resourceapi.DeviceClass)) error {
	d, err := client.ResourceV1().DeviceClasses().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	edit(d)
	_, err = c.ResourceV1().DeviceClasses().Update(context.Background(), d, metav1.UpdateOptions{DryRun: dryRun})
	return err
}

func createDaemonSet(c kubernetes.Interface, ns, name string) error {
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/any"}}}}}}
	_, err := c.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{DryRun: dryRun})
	return err
}

func createSecret(c kubernetes.Interface, ns, name string, typ corev1.SecretType, annotations map[string]string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations}, Type: typ}
	if typ == corev1.SecretTypeTLS {
		s.Data = map[string][]byte{corev1.TLSCertKey: []byte("-"), corev1.TLSPrivateKeyKey: []byte("-")}
	}
	_, err := c.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{DryRun: dryRun})
	return err
}

// TestHelmControllerPolicyRules evaluates the chart's policies on the
// controller's ServiceAccount: the DeviceClasses internal/controller/deviceclass
// writes are admitted, other drivers' classes, administrators' classes,
// wider selectors, opaque config and other extended resources are not; only
// the certificate Secret may be written.
func TestHelmControllerPolicyRules(t *testing.T) {
	skipWithoutHelm(t)
	const ns, release = "gpudra-system", "x"
	controller := "system:serviceaccount:" + ns + ":" + release + "-gpudra-controller"
	classes := chartPolicy(t, release, ns, "controller-deviceclasses")
	noModels := chartPolicy(t, release, ns, "controller-deviceclasses",
		"--set", "deviceClasses.perModel=false", "--set", "deviceClasses.extendedResourceName=")
	must := func(c *resourceapi.DeviceClass, err error) *resourceapi.DeviceClass {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		c.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"}
		return c
	}
	typed := func(c *resourceapi.DeviceClass) *resourceapi.DeviceClass {
		c.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"}
		return c
	}
	base := deviceclass.BaseClasses("nvidia.com/gpu")
	gpu, mig := typed(base[0]), typed(base[1])
	h100 := must(deviceclass.ModelClass("NVIDIA H100 80GB HBM3"))
	quoted := must(deviceclass.ModelClass(`NVIDIA "X" || true \ 1`))
	profile := must(deviceclass.MIGProfileClass("1g.10gb+me", "nvidia.com/mig-"))
	edit := func(c *resourceapi.DeviceClass, f func(*resourceapi.DeviceClass)) *resourceapi.DeviceClass {
		c = c.DeepCopy()
		f(c)
		return c
	}
	unlabelled := edit(h100, func(c *resourceapi.DeviceClass) { c.Labels = nil })
	otherDriver := edit(gpu, func(c *resourceapi.DeviceClass) { c.Name = "gpu.example.com" })
	widened := edit(gpu, func(c *resourceapi.DeviceClass) {
		c.Spec.Selectors[0].CEL.Expression += ` || device.driver == "gpu.example.com"`
	})
	twoSelectors := edit(gpu, func(c *resourceapi.DeviceClass) {
		c.Spec.Selectors = append(c.Spec.Selectors, c.Spec.Selectors[0])
	})
	withConfig := edit(gpu, func(c *resourceapi.DeviceClass) {
		c.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}}}
	})
	otherERN := func(c *resourceapi.DeviceClass, ern string) *resourceapi.DeviceClass {
		return edit(c, func(c *resourceapi.DeviceClass) { c.Spec.ExtendedResourceName = ptr.To(ern) })
	}
	for _, tc := range []struct {
		name     string
		policy   validating.Validator
		user     string
		obj, old *resourceapi.DeviceClass
		allowed  bool
	}{
		{"create the GPU class", classes, controller, gpu, nil, true},
		{"create the MIG class", classes, controller, mig, nil, true},
		{"create a per-model class", classes, controller, h100, nil, true},
		{"create a per-model class of a productName with quotes", classes, controller, quoted, nil, true},
		{"create a per-profile MIG class", classes, controller, profile, nil, true},
		{"update the GPU class", classes, controller, gpu, gpu, true},
		{"delete a per-model class", classes, controller, nil, h100, true},
		{"create another driver's class", classes, controller, otherDriver, nil, false},
		{"update another driver's class", classes, controller, otherDriver, otherDriver, false},
		{"delete another driver's class", classes, controller, nil, otherDriver, false},
		{"take over a class without the managed-by label", classes, controller, h100, unlabelled, false},
		{"delete a class without the managed-by label", classes, controller, nil, unlabelled, false},
		{"create a class without the managed-by label", classes, controller, unlabelled, nil, false},
		{"a selector that also matches another driver", classes, controller, widened, nil, false},
		{"two selectors", classes, controller, twoSelectors, nil, false},
		{"opaque config", classes, controller, withConfig, nil, false},
		{"the GPU class with another extended resource", classes, controller, otherERN(gpu, "example.com/gpu"), nil, false},
		{"the MIG class with an extended resource", classes, controller, otherERN(mig, "nvidia.com/gpu"), nil, false},
		{"a per-model class with an extended resource", classes, controller, otherERN(h100, "nvidia.com/gpu"), nil, false},
		{"a per-profile class with another profile's resource", classes, controller, otherERN(profile, "nvidia.com/mig-7g.80gb"), nil, false},
		{"per-model classes turned off", noModels, controller, h100, nil, false},
		{"no extended resource configured", noModels, controller, gpu, nil, false},
		{"no extended resource configured, none set", noModels, controller, typed(deviceclass.BaseClasses("")[0]), nil, true},
		{"another user is not checked", classes, "system:serviceaccount:kube-system:x", otherDriver, unlabelled, true},
	} {
		t.Run("DeviceClass: "+tc.name, func(t *testing.T) {
			var obj, old runtime.Object
			if tc.obj != nil {
				obj = tc.obj
			}
			if tc.old != nil {
				old = tc.old
			}
			allowed, denials := evalWrite(tc.policy, tc.user, "", resourceapi.SchemeGroupVersion, "DeviceClass", "deviceclasses", obj, old)
			if allowed != tc.allowed {
				t.Errorf("allowed=%v, want %v; denials: %v", allowed, tc.allowed, denials)
			}
		})
	}

	secrets := chartPolicy(t, release, ns, "controller-secrets")
	secret := func(name string, typ corev1.SecretType, annotations map[string]string) *corev1.Secret {
		return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations}, Type: typ}
	}
	cert := secret(release+"-gpudra-webhook-tls", corev1.SecretTypeTLS, nil)
	for _, tc := range []struct {
		name     string
		obj, old *corev1.Secret
		allowed  bool
	}{
		{"create the certificate Secret", cert, nil, true},
		{"update the certificate Secret", cert, cert, true},
		{"create another TLS Secret", secret("other", corev1.SecretTypeTLS, nil), nil, false},
		{"create the certificate Secret as Opaque", secret(cert.Name, corev1.SecretTypeOpaque, nil), nil, false},
		{"mint a token of the plugin's ServiceAccount", secret("plugin-token", corev1.SecretTypeServiceAccountToken,
			map[string]string{corev1.ServiceAccountNameKey: release + "-gpudra-kubelet-plugin"}), nil, false},
	} {
		t.Run("Secret: "+tc.name, func(t *testing.T) {
			var old runtime.Object
			if tc.old != nil {
				old = tc.old
			}
			allowed, denials := evalWrite(secrets, controller, "", corev1.SchemeGroupVersion, "Secret", "secrets", tc.obj, old)
			if allowed != tc.allowed {
				t.Errorf("allowed=%v, want %v; denials: %v", allowed, tc.allowed, denials)
			}
		})
	}
}
