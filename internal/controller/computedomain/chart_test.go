package computedomain

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/chart"
)

var (
	dsGVR  = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	rctGVR = resourceapi.SchemeGroupVersion.WithResource("resourceclaimtemplates")
)

// rendered is what the chart says about the ComputeDomain controller in one
// mode: its ServiceAccount's user, the daemon image flag, the groups its
// ClusterRole grants, and its compiled admission policy.
type rendered struct {
	user, image string
	groups      []string
	policy      validating.Validator
}

func render(t *testing.T, args ...string) rendered {
	t.Helper()
	var r rendered
	objs := chart.Render(t, args...)
	for _, o := range chart.OfKind(objs, "ServiceAccount") {
		if name := o["metadata"].(map[string]any)["name"].(string); strings.HasSuffix(name, "-controller") {
			r.user = "system:serviceaccount:gpudra-system:" + name
		}
	}
	for _, o := range chart.OfKind(objs, "Deployment") {
		d := &appsv1.Deployment{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, d))
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			if img, ok := strings.CutPrefix(a, "--compute-domain-daemon-image="); ok {
				r.image = img
			}
		}
	}
	for _, o := range chart.OfKind(objs, "ClusterRole") {
		cr := &rbacv1.ClusterRole{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, cr))
		for _, rule := range cr.Rules {
			if slices.Contains(rule.Resources, v1alpha1.ComputeDomainResource) {
				r.groups = append(r.groups, rule.APIGroups...)
			}
		}
	}
	if r.image != "" {
		r.policy = chart.Policy(t, strings.TrimPrefix(r.user, "system:serviceaccount:gpudra-system:")+"-computedomains", args...)
	}
	return r
}

// chartMode is one of the chart's two modes: its helm arguments and the
// names the controller uses in it.
type chartMode struct {
	mode  string
	args  []string
	names compat.Names
}

func chartModes() []chartMode {
	return []chartMode{
		{"native", nil, compat.Default()},
		{"nvidia", []string{"--set", "compatibility=nvidia"}, compat.MustResolve(compat.Flags{Compatibility: "nvidia"})},
	}
}

// TestChartMatchesController: the chart grants the ComputeDomain groups the
// controller serves in each mode, passes it the daemon image, and its
// admission policy admits exactly the objects the controller makes (the
// real ones, built by this package) and refuses what it never makes.
func TestChartMatchesController(t *testing.T) {
	for _, tc := range chartModes() {
		t.Run(tc.mode, func(t *testing.T) {
			r := render(t, tc.args...)
			var want []string
			for _, gv := range tc.names.ComputeDomainVersions() {
				want = append(want, gv.Group)
			}
			assert.ElementsMatch(t, want, r.groups)
			require.NotEmpty(t, r.image, "the chart passes --compute-domain-daemon-image")

			c := &Controller{cfg: Config{Names: tc.names, Namespace: driverNS, DaemonImage: r.image}, cd: tc.names.ComputeDomain()}
			cd := &v1alpha1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", UID: "uid-1"},
				Spec: v1alpha1.ComputeDomainSpec{Channel: &v1alpha1.ComputeDomainChannel{
					ResourceClaimTemplate: v1alpha1.ChannelClaimTemplate{Name: "chan"}, AllocationMode: v1alpha1.AllChannels}}}
			cd.APIVersion = v1alpha1.APIVersion
			k := key{v1alpha1.GroupName, "team-a", "train"}
			channel, err := c.channelTemplate(k, cd)
			require.NoError(t, err)
			daemon, err := c.daemonTemplate(k, cd)
			require.NoError(t, err)
			ds, err := c.daemonSet(k, cd)
			require.NoError(t, err)
			typed(channel, daemon, ds)

			privileged := ds.DeepCopy()
			privileged.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptrTo(true)}
			sysAdmin := ds.DeepCopy()
			sysAdmin.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{DaemonCapability, "SYS_ADMIN"}
			keepsCaps := ds.DeepCopy()
			keepsCaps.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Drop = nil
			escalates := ds.DeepCopy()
			escalates.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
			otherImage := ds.DeepCopy()
			otherImage.Spec.Template.Spec.Containers[0].Image = "evil.example/x"
			hostPath := ds.DeepCopy()
			hostPath.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			token := ds.DeepCopy()
			token.Spec.Template.Spec.AutomountServiceAccountToken = nil
			token.Spec.Template.Spec.ServiceAccountName = "gpudra-kubelet-plugin"
			everywhere := ds.DeepCopy()
			everywhere.Spec.Template.Spec.NodeSelector = nil
			gpus := channel.DeepCopy()
			gpus.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = tc.names.GPUClass
			foreign := channel.DeepCopy()
			foreign.Spec.Spec.Devices.Config[0].Opaque.Driver = tc.names.Driver
			users := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "chan", Namespace: "team-a"}}
			usersDS := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: driverNS}}
			typed(users, usersDS)
			oldImage := ds.DeepCopy()
			oldImage.Spec.Template.Spec.Containers[0].Image = "registry.example/gpudra:old"
			otherDomain := ds.DeepCopy()
			otherDomain.Labels[tc.names.ComputeDomain().Label] = "uid-2"
			otherDomain.Spec.Template.Spec.NodeSelector = map[string]string{tc.names.ComputeDomain().Label: "uid-2"}
			otherRef := ds.DeepCopy()
			otherRef.Annotations[RefAnnotation] = v1alpha1.GroupName + "/team-b/train"
			for _, w := range []struct {
				name     string
				user     string
				obj, old runtime.Object
				allowed  bool
			}{
				{"create the DaemonSet", r.user, ds, nil, true},
				{"delete the DaemonSet", r.user, nil, ds, true},
				{"create the channel template", r.user, channel, nil, true},
				{"create the daemon template", r.user, daemon, nil, true},
				{"delete the channel template", r.user, nil, channel, true},
				{"a privileged daemon", r.user, privileged, nil, false},
				{"another image", r.user, otherImage, nil, false},
				{"a capability beyond SYS_CHROOT", r.user, sysAdmin, nil, false},
				{"capabilities not dropped", r.user, keepsCaps, nil, false},
				{"privilege escalation not ruled out", r.user, escalates, nil, false},
				{"a hostPath volume", r.user, hostPath, nil, false},
				{"another ServiceAccount with its token", r.user, token, nil, false},
				{"daemons on every node", r.user, everywhere, nil, false},
				{"update the DaemonSet, unchanged", r.user, ds, ds, true},
				{"update the DaemonSet from an old image to the chart's", r.user, ds, oldImage, true},
				{"update the DaemonSet to another image", r.user, otherImage, ds, false},
				{"update the DaemonSet to a privileged daemon", r.user, privileged, ds, false},
				{"update a DaemonSet it did not make", r.user, ds, usersDS, false},
				{"move the DaemonSet to another domain", r.user, otherDomain, ds, false},
				{"point the DaemonSet to another domain", r.user, otherRef, ds, false},
				{"update a template", r.user, channel, channel, false},
				{"a template for GPUs", r.user, gpus, nil, false},
				{"configuration for another driver", r.user, foreign, nil, false},
				{"delete a user's template", r.user, nil, users, false},
				{"another user is not checked", "system:serviceaccount:x:y", privileged, nil, true},
			} {
				gvr, kind := rctGVR, "ResourceClaimTemplate"
				if _, ok := firstNonNil(w.obj, w.old).(*appsv1.DaemonSet); ok {
					gvr, kind = dsGVR, "DaemonSet"
				}
				allowed, denials := chart.EvalWrite(r.policy, w.user, gvr, kind, w.obj, w.old)
				assert.Equal(t, w.allowed, allowed, "%s: denials %v", w.name, denials)
			}
		})
	}
}

func typed(objs ...runtime.Object) {
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.DaemonSet:
			x.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
		case *resourceapi.ResourceClaimTemplate:
			x.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"}
		}
	}
}

func firstNonNil(a, b runtime.Object) runtime.Object {
	if a != nil {
		return a
	}
	return b
}

func ptrTo[T any](v T) *T { return &v }
