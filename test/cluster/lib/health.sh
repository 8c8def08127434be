# shellcheck shell=bash
# Health monitoring on the local cluster: the plugins' extra permissions
# (claim status.devices), their metrics ports, and the simulated-fault
# commands (inject-fault, clear-faults) that break and repair a node's GPUs
# through the fault control file of its simulated driver root. Sourced by
# cluster.sh.

# plugin_metrics_port NODE: each plugin serves /metrics on
# PLUGIN_METRICS_PORT + the node's slot.
plugin_metrics_port() { echo $((PLUGIN_METRICS_PORT + $(node_slot "$1"))); }

# fault_file NODE: the simulated-fault control file of a node's driver root,
# read by its simulated libnvidia-ml (test/fakedriver).
fault_file() { echo "$(driver_root "$1")/var/lib/gpudra-sim/faults"; }

# plugin_rbac: the plugins run with their node's identity. The Node
# authorizer lets a node read its pods' claims and write its slices; writing
# the driver's entries of a claim's status.devices needs RBAC on
# resourceclaims/status and on the synthetic resourceclaims/driver
# subresource named after the driver. A node user is not a ServiceAccount
# bound to the claim's node, so the API server checks the arbitrary-node
# verbs (the chart's ServiceAccount gets associated-node instead).
plugin_rbac() {
	cat <<-EOF
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRole
		metadata: {name: gpudra-local-plugin-claim-status}
		rules:
		- apiGroups: [resource.k8s.io]
		  resources: [resourceclaims/status]
		  verbs: [update, patch]
		- apiGroups: [resource.k8s.io]
		  resources: [resourceclaims/driver]
		  resourceNames: [$DRIVER_NAME]
		  verbs: ["arbitrary-node:update", "arbitrary-node:patch"]
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: gpudra-local-plugin-claim-status}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpudra-local-plugin-claim-status}
		subjects:
		- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}
	EOF
}

apply_plugin_rbac() {
	plugin_rbac | kubectl_admin apply -f - >/dev/null || die "cannot apply the plugins' RBAC"
}

# cmd_inject_fault NODE GPU FAULT...: append a fault line (see
# pkg/nvmllib/sim/faultfile.go), e.g. `inject-fault gpu-h100 gpu-3 xid 79`.
cmd_inject_fault() {
	local node=${1:-}
	shift || true
	[[ -n $node && $# -ge 2 ]] || die "usage: $0 inject-fault NODE GPU xid N|ecc|lost|thermal"
	load_settings
	node_profile "$node" >/dev/null
	echo "$*" >>"$(fault_file "$node")"
	log "fault on $node: $* (the plugin applies it within a second)"
}

# cmd_clear_faults NODE: empty the node's fault file; its GPUs are reset.
cmd_clear_faults() {
	local node=${1:-}
	[[ -n $node ]] || die "usage: $0 clear-faults NODE"
	load_settings
	node_profile "$node" >/dev/null
	: >"$(fault_file "$node")"
	log "faults of $node cleared (GPUs reset)"
}
