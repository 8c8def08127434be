// Package computedomain is the ComputeDomain controller of the gpu-controller
// (leader only). For each ComputeDomain (gpudra's resource.gpudra.io group,
// and NVIDIA's resource.nvidia.com in the NVIDIA mode) it
//
//   - adds a finalizer, so that what it creates is removed with the domain;
//   - creates the workload's ResourceClaimTemplate named in
//     spec.channel.resourceClaimTemplate (in the domain's namespace, owned by
//     the domain), which asks for an IMEX channel of the domain;
//   - creates, in the driver's namespace, one DaemonSet of IMEX daemons per
//     domain and the ResourceClaimTemplate of the daemons' own claims. The
//     DaemonSet selects nodes by the domain's node label, which the node side
//     sets on the nodes the workload's channel claims are prepared on;
//   - updates that DaemonSet when it is not what the controller would create
//     now (a new image after an upgrade), compared by a hash annotation of
//     what the controller sets; its OnDelete strategy leaves running daemons
//     alone until their pods are deleted;
//   - writes the status from the daemons' pods (node, address, readiness)
//     and the nodes' clique IDs (from the GPU driver's ResourceSlices): the
//     controller is the only writer, patches without a resourceVersion, and
//     coalesces bursts of pod events into one write per domain;
//   - nudges the kubelet of a daemon pod whose sandbox it has not created
//     some seconds after scheduling (a failed DRA prepare, which the kubelet
//     retries only at its resync, kubernetes#139836) by changing one
//     annotation, 4 times at most (nudge.go);
//   - on deletion, deletes the DaemonSet and both templates and then removes
//     its finalizer; children left by a domain that disappeared without the
//     finalizer (or that was recreated under the same name) are deleted too.
//
// The ComputeDomain CRDs are optional: Run watches discovery and runs the
// controller only while at least one of the mode's groups is served, so the
// rest of the gpu-controller (DeviceClasses, the webhook) works without them.
// docs/computedomains.md has the design and why.
package computedomain
