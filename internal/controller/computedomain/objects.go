package computedomain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

// DaemonCommand and DaemonCheckCommand are the IMEX daemon's entry point
// and readiness check in DaemonImage. They are the contract with the node
// side (issue 26 part 3, internal/plugin/computedomain), which no running
// plugin serves yet: until something labels nodes with a domain's UID, the
// DaemonSets have no pods.
var (
	DaemonCommand      = []string{"gpu-kubelet-plugin", "imex-daemon", "run"}
	DaemonCheckCommand = []string{"gpu-kubelet-plugin", "imex-daemon", "check"}
)

// Request and container names in the created objects.
const (
	channelRequest = "channel"
	daemonRequest  = "daemon"
	daemonClaim    = "imex-daemon"
)

// decode reads a ComputeDomain of either group from the informer's
// unstructured object.
func decode(obj any) (*v1alpha1.ComputeDomain, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("ComputeDomain informer holds a %T", obj)
	}
	cd := &v1alpha1.ComputeDomain{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cd); err != nil {
		return nil, fmt.Errorf("read ComputeDomain %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return cd, nil
}

// meta returns the labels and annotations of every object created for cd.
func (c *Controller) meta(k key, cd *v1alpha1.ComputeDomain, name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace,
		Labels:      map[string]string{c.cd.Label: string(cd.UID)},
		Annotations: map[string]string{RefAnnotation: k.String()}}
}

func (c *Controller) claimTemplate(k key, cd *v1alpha1.ComputeDomain, name, namespace, request, class string,
	params imex.ClaimConfig) (*resourceapi.ResourceClaimTemplate, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode the %s configuration: %w", params.Kind, err)
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: c.meta(k, cd, name, namespace),
		Spec: resourceapi.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{c.cd.Label: string(cd.UID)}},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: request, Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}},
				Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{request},
					DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
						Driver: c.cd.Driver, Parameters: runtime.RawExtension{Raw: raw}}}}},
			}},
		},
	}, nil
}

// channelTemplate is the workload's template: one channel device of the
// channel class per claim, whatever the allocation mode. With All the node
// side injects every channel of the IMEX domain for that one device:
// DRA's own allocationMode All would take every channel device the node
// publishes, leaving none for the next pod of the domain on that node.
func (c *Controller) channelTemplate(k key, cd *v1alpha1.ComputeDomain) (*resourceapi.ResourceClaimTemplate, error) {
	mode := v1alpha1.SingleChannel
	if cd.Spec.Channel.AllocationMode != "" {
		mode = cd.Spec.Channel.AllocationMode
	}
	t, err := c.claimTemplate(k, cd, cd.Spec.Channel.ResourceClaimTemplate.Name, cd.Namespace, channelRequest, c.cd.ChannelClass,
		imex.ClaimConfig{APIVersion: c.cd.ConfigAPIVersion, Kind: c.cd.ChannelConfigKind, DomainID: string(cd.UID), AllocationMode: string(mode)})
	if err != nil {
		return nil, err
	}
	// Owned by the domain (same namespace), so the garbage collector
	// removes it should the finalizer ever be taken off by hand.
	t.OwnerReferences = []metav1.OwnerReference{{APIVersion: cd.APIVersion, Kind: v1alpha1.ComputeDomainKind,
		Name: cd.Name, UID: cd.UID, Controller: ptr.To(true)}}
	return t, nil
}

// daemonTemplate is the template of the IMEX daemons' own claims, in the
// driver's namespace.
func (c *Controller) daemonTemplate(k key, cd *v1alpha1.ComputeDomain) (*resourceapi.ResourceClaimTemplate, error) {
	return c.claimTemplate(k, cd, daemonName(string(cd.UID)), c.cfg.Namespace, daemonRequest, c.cd.DaemonClass,
		imex.ClaimConfig{APIVersion: c.cd.ConfigAPIVersion, Kind: c.cd.DaemonConfigKind, DomainID: string(cd.UID)})
}

// daemonSecurityContext is what the IMEX daemon's container may do: it
// starts nvidia-imex chrooted into the node's driver root (the tools are
// linked against the driver root's C library, not the image's), which takes
// CAP_SYS_CHROOT, and the image's user (65532) holds no capability; it runs
// as root with every other capability dropped and no privilege escalation.
// The files it writes under the driver root's tmp/ and the fabric
// management device node it opens are root's.
func daemonSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false),
		AllowPrivilegeEscalation: ptr.To(false), Privileged: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{DaemonCapability}},
	}
}

// DaemonCapability is the one capability of the IMEX daemon's container.
const DaemonCapability = "SYS_CHROOT"

// SpecHashAnnotation, on each DaemonSet the controller makes, is the hash
// of what the controller set in it (its labels, its other annotations and
// its spec; specHash). The controller updates a DaemonSet whose hash is not
// the one it would write now: a new image, command or any other field of
// its making. Comparing hashes rather than objects means the fields the
// API server fills in (the update strategy's details, the pod defaults,
// revisionHistoryLimit, ...) never look like a difference, so a resync
// writes nothing.
const SpecHashAnnotation = "gpudra.io/computedomain-spec-hash"

// specHash is the hash of the labels, annotations (but the hash's own) and
// spec of ds: hex SHA-256 of their JSON (maps are encoded with sorted
// keys), first 16 bytes.
func specHash(ds *appsv1.DaemonSet) (string, error) {
	annotations := map[string]string{}
	for k, v := range ds.Annotations {
		if k != SpecHashAnnotation {
			annotations[k] = v
		}
	}
	raw, err := json.Marshal(struct {
		Labels, Annotations map[string]string
		Spec                appsv1.DaemonSetSpec
	}{ds.Labels, annotations, ds.Spec})
	if err != nil {
		return "", fmt.Errorf("encode DaemonSet %s/%s to hash it: %w", ds.Namespace, ds.Name, err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:16]), nil
}

// daemonSet runs one IMEX daemon on each node labelled with the domain's
// UID. The daemons need no API access: the controller reads their
// readiness from the pods, so they get no ServiceAccount token. It carries
// SpecHashAnnotation.
//
// Its update strategy is OnDelete: a changed template (a gpudra upgrade
// with a new image) replaces no running daemon; a daemon gets the new
// template when its pod is next created (its node joins the domain again,
// or an operator deletes the pod). Rolling daemons node by node would stop
// the IMEX daemon under a running multi-node job, whose imported memory
// depends on it (docs/computedomains.md, Upgrades of the IMEX daemons).
func (c *Controller) daemonSet(k key, cd *v1alpha1.ComputeDomain) (*appsv1.DaemonSet, error) {
	name, uid := daemonName(string(cd.UID)), string(cd.UID)
	labels := map[string]string{c.cd.Label: uid}
	m := c.meta(k, cd, name, c.cfg.Namespace)
	env := []corev1.EnvVar{
		{Name: imex.DomainUIDEnv, Value: uid},
		{Name: imex.DomainEnv, Value: k.String()},
		{Name: imex.NodeNameEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: imex.PodIPEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: m,
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{RefAnnotation: k.String()}},
				Spec: corev1.PodSpec{
					NodeSelector:                 labels,
					AutomountServiceAccountToken: ptr.To(false),
					// The daemon must run wherever the workload runs,
					// tainted GPU nodes included.
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "imex-daemon", Image: c.cfg.DaemonImage, Command: DaemonCommand, Env: env,
						Resources:       corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: daemonClaim}}},
						SecurityContext: daemonSecurityContext(),
						// Every second until the daemon is first ready (the
						// workload's prepares wait for that), then every 5
						// seconds. A daemon never ready within an hour (a
						// domain whose other nodes never came) is restarted.
						StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: DaemonCheckCommand}},
							PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 3600},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: DaemonCheckCommand}},
							PeriodSeconds: 5, TimeoutSeconds: 5, FailureThreshold: 1},
					}},
					ResourceClaims: []corev1.PodResourceClaim{{Name: daemonClaim, ResourceClaimTemplateName: ptr.To(name)}},
				},
			},
		},
	}
	hash, err := specHash(ds)
	if err != nil {
		return nil, err
	}
	ds.Annotations[SpecHashAnnotation] = hash
	return ds, nil
}
