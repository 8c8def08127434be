// Package webhook is gpudra's validating admission webhook. It checks the
// opaque device configuration of ResourceClaims, ResourceClaimTemplates and
// DeviceClasses (resource.k8s.io v1, v1beta2 and v1beta1): every
// spec.devices.config[].opaque entry (spec.config[].opaque in a DeviceClass)
// whose driver is gpu.gpudra.io must decode as a valid GpuClaimParameters
// (see v1alpha1.Decode), so that a typo is reported when the object is
// created instead of when a pod using it is stuck in ContainerCreating. For a
// DeviceClass this matters most: its configuration is copied into every
// claim allocated from the class, so a bad one fails all of them. Everything
// else is allowed: configs of other drivers, objects without configs,
// deletions, and whatever the API server validates itself (for example
// configs naming requests the claim lacks).
//
// It also checks ComputeDomains (resource.gpudra.io/v1alpha1; in the NVIDIA
// compatibility mode resource.nvidia.com/v1beta1 too): at creation the spec
// must decode strictly and validate (v1alpha1.ValidateComputeDomainSpec);
// an update may not change numNodes or channel. The chart's CRD schema
// enforces the same before the webhook is asked, so the webhook matters for
// a CRD that is not the chart's (NVIDIA's, left by its chart) and for the
// checks the schema cannot make. Updates that keep the spec are always
// allowed, so finalizers of old objects can be removed.
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
//     never wait for it (DeviceClasses are cluster-scoped: the API server
//     never skips a webhook for them by namespace);
//   - operations: [CREATE] only for claims and templates. Their device spec
//     is immutable, so nothing is gained by checking updates, and denying an
//     update of an object created while the webhook was away would block the
//     removal of its finalizers;
//   - operations: [CREATE, UPDATE] for DeviceClasses, whose spec can be
//     edited. For every kind the handler allows updates that leave the
//     configs unchanged, so an object that predates the webhook can still
//     have its metadata changed;
//   - operations: [CREATE, UPDATE] for computedomains, to refuse spec
//     changes with a message that names the field;
//   - sideEffects: None and matchPolicy: Equivalent.
//
// The caBundle is filled in by the gpu-controller in its self-managed
// certificate mode (see package certs), or by cert-manager's CA injector.
package webhook
