// Package webhook is gpudra's validating admission webhook. It checks the
// opaque device configuration of ResourceClaims and ResourceClaimTemplates
// (resource.k8s.io v1, v1beta2 and v1beta1): every
// spec.devices.config[].opaque entry whose driver is gpu.gpudra.io must
// decode as a valid GpuClaimParameters (see v1alpha1.Decode), so that a typo
// is reported when the object is created instead of when a pod using it is
// stuck in ContainerCreating. Everything else is allowed: configs of other
// drivers, objects without configs, deletions, and whatever the API server
// validates itself (for example configs naming requests the claim lacks).
//
// # Failure policy
//
// The webhook is a convenience, not a safety net: the kubelet plugin decodes
// the same parameters with the same function when it prepares a claim and
// refuses bad ones there (defence in depth). A webhook that is down, slow or
// unreachable must therefore never block the cluster. The recommended
// ValidatingWebhookConfiguration, in testdata/validatingwebhookconfiguration.yaml
// and checked by this package's tests, uses:
//
//   - failurePolicy: Ignore, so an unavailable webhook lets objects through
//     (they are then rejected at prepare time);
//   - timeoutSeconds: 5, well below the API server's 30s request budget;
//   - a namespaceSelector that excludes kube-system, so system components
//     never wait for it;
//   - operations: [CREATE] only. The device spec of claims and templates is
//     immutable, so nothing is gained by checking updates, and denying an
//     update of an object created while the webhook was away would block the
//     removal of its finalizers. The handler allows updates that leave the
//     configs unchanged for the same reason, should a configuration list
//     UPDATE anyway;
//   - sideEffects: None and matchPolicy: Equivalent.
//
// The caBundle is filled in by the gpu-controller in its self-managed
// certificate mode (see package certs), or by cert-manager's CA injector.
package webhook
