# shellcheck shell=bash
# The gpu-controller on the local cluster: a host process (PID file and log
# like the other components) that serves the admission webhook on
# https://127.0.0.1:<CONTROLLER_WEBHOOK_PORT> and manages the DeviceClasses.
# It runs under a dedicated identity: a client certificate for the user
# gpudra-controller, with RBAC for exactly what it does (see
# controller_rbac). Sourced by cluster.sh.

CONTROLLER_COMPONENT=gpu-controller
CONTROLLER_USER=gpudra-controller
# The ValidatingWebhookConfiguration start-controller creates and
# stop-controller deletes; the controller fills in its caBundle.
CONTROLLER_WEBHOOK_CONFIG=gpudra-local-controller
CONTROLLER_CERT_SECRET=gpudra-webhook-tls

controller_kubeconfig() { echo "$KUBECONFIG_DIR/$CONTROLLER_COMPONENT.kubeconfig"; }

# ensure_controller_identity signs the controller's client certificate and
# writes its kubeconfig once; a cluster started before this existed gets
# them on the first start-controller.
ensure_controller_identity() {
	[[ -s $(controller_kubeconfig) ]] && return 0
	sign_cert "$CONTROLLER_COMPONENT" "/CN=$CONTROLLER_USER" clientAuth
	write_kubeconfig "$(controller_kubeconfig)" "$CONTROLLER_USER" "$CONTROLLER_COMPONENT"
}

# controller_rbac prints the namespace and the RBAC objects of the
# controller: DeviceClasses read/write; ResourceSlices and ResourceClaims
# read (model classes follow them); get/update of its own webhook
# configuration (caBundle) and of its certificate Secret; events.
controller_rbac() {
	cat <<-EOF
		apiVersion: v1
		kind: Namespace
		metadata: {name: $CONTROLLER_NAMESPACE}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRole
		metadata: {name: gpudra-local-controller}
		rules:
		- apiGroups: [resource.k8s.io]
		  resources: [deviceclasses]
		  verbs: [get, list, watch, create, update, patch, delete]
		- apiGroups: [resource.k8s.io]
		  resources: [resourceslices, resourceclaims]
		  verbs: [get, list, watch]
		- apiGroups: [admissionregistration.k8s.io]
		  resources: [validatingwebhookconfigurations]
		  resourceNames: [$CONTROLLER_WEBHOOK_CONFIG]
		  verbs: [get, list, watch, update]
		- apiGroups: [events.k8s.io]
		  resources: [events]
		  verbs: [create, patch, update]
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: gpudra-local-controller}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpudra-local-controller}
		subjects:
		- {apiGroup: rbac.authorization.k8s.io, kind: User, name: $CONTROLLER_USER}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: Role
		metadata: {name: gpudra-local-controller, namespace: $CONTROLLER_NAMESPACE}
		rules:
		- apiGroups: [""]
		  resources: [secrets]
		  resourceNames: [$CONTROLLER_CERT_SECRET]
		  verbs: [get, list, watch, update]
		- apiGroups: [""]
		  resources: [secrets]
		  verbs: [create]
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: RoleBinding
		metadata: {name: gpudra-local-controller, namespace: $CONTROLLER_NAMESPACE}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gpudra-local-controller}
		subjects:
		- {apiGroup: rbac.authorization.k8s.io, kind: User, name: $CONTROLLER_USER}
	EOF
}

# controller_webhook_config prints the ValidatingWebhookConfiguration: the
# settings of pkg/webhook/testdata/validatingwebhookconfiguration.yaml
# (failurePolicy Ignore, 5s, claims and templates on CREATE, DeviceClasses on
# CREATE and UPDATE, kube-system excluded for the namespaced ones), reached by
# URL on the host instead of through a Service, without a caBundle (the
# controller sets it). With GPUDRA_CONTROLLER_WEBHOOK_NAMESPACE_LABEL set,
# only namespaces carrying that label key are checked.
controller_webhook_config() {
	local label_rule=""
	if [[ -n $CONTROLLER_NAMESPACE_LABEL ]]; then
		label_rule="    - {key: $CONTROLLER_NAMESPACE_LABEL, operator: Exists}"
	fi
	cat <<-EOF
		apiVersion: admissionregistration.k8s.io/v1
		kind: ValidatingWebhookConfiguration
		metadata:
		  name: $CONTROLLER_WEBHOOK_CONFIG
		  labels: {app.kubernetes.io/name: gpudra-controller, app.kubernetes.io/part-of: gpudra-local-cluster}
		webhooks:
		- name: claimparameters.gpu.gpudra.io
		  admissionReviewVersions: ["v1"]
		  sideEffects: None
		  failurePolicy: Ignore
		  timeoutSeconds: 5
		  matchPolicy: Equivalent
		  namespaceSelector:
		    matchExpressions:
		    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}
		$label_rule
		  rules:
		  - apiGroups: [resource.k8s.io]
		    apiVersions: [v1]
		    operations: [CREATE]
		    resources: [resourceclaims, resourceclaimtemplates]
		    scope: Namespaced
		  - apiGroups: [resource.k8s.io]
		    apiVersions: [v1]
		    operations: [CREATE, UPDATE]
		    resources: [deviceclasses]
		    scope: Cluster
		  clientConfig:
		    url: https://127.0.0.1:$CONTROLLER_WEBHOOK_PORT/validate-resource-claim-parameters
	EOF
}

start_controller_process() {
	start_component "$CONTROLLER_COMPONENT" "$BIN_DIR/gpu-controller" \
		--kubeconfig "$(controller_kubeconfig)" \
		--namespace "$CONTROLLER_NAMESPACE" \
		--leader-elect=false \
		--cert-mode self-managed \
		--cert-secret-name "$CONTROLLER_CERT_SECRET" \
		--cert-extra-sans 127.0.0.1 \
		--webhook-configuration-name "$CONTROLLER_WEBHOOK_CONFIG" \
		--webhook-port "$CONTROLLER_WEBHOOK_PORT" \
		--metrics-port "$CONTROLLER_METRICS_PORT" \
		--extended-resource-name nvidia.com/gpu \
		-v "$CONTROLLER_VERBOSITY"
}

controller_ready() { curl -sf --max-time 2 "http://127.0.0.1:$CONTROLLER_METRICS_PORT/readyz" | grep -qx ok; }

ca_bundle_set() {
	local ca
	ca=$(kubectl_admin get validatingwebhookconfiguration "$CONTROLLER_WEBHOOK_CONFIG" \
		-o jsonpath='{.webhooks[0].clientConfig.caBundle}') || return 1
	[[ -n $ca ]]
}

# webhook_rejects_bad_claim: a server-side dry run of a claim with an invalid
# sharing strategy is refused by the webhook (and not merely let through by
# failurePolicy Ignore). Nothing is created.
webhook_rejects_bad_claim() {
	local ns=${1:-default} out
	out=$(kubectl_admin -n "$ns" create --dry-run=server -o name -f - 2>&1 <<-EOF
		apiVersion: resource.k8s.io/v1
		kind: ResourceClaim
		metadata: {generateName: gpudra-webhook-probe-}
		spec:
		  devices:
		    requests:
		    - {name: gpu, exactly: {deviceClassName: gpu.gpudra.io}}
		    config:
		    - opaque:
		        driver: gpu.gpudra.io
		        parameters: {apiVersion: resource.gpudra.io/v1alpha1, kind: GpuClaimParameters, sharing: {strategy: Sometimes}}
	EOF
	) && return 1
	[[ $out == *claimparameters.gpu.gpudra.io*sharing.strategy* ]]
}

cmd_start_controller() {
	require_root
	load_settings
	apiserver_ready || die "the cluster is not running; start it with 'make cluster-up'"
	[[ -x $BIN_DIR/gpu-controller ]] || {
		log "building gpudra: make -C $REPO_ROOT build"
		make -C "$REPO_ROOT" --no-print-directory build BIN="$BIN_DIR" || die "make build failed"
	}
	# shellcheck disable=SC2034 # read by elapsed (common.sh)
	START_MS=$(now_ms)
	if ! is_running "$CONTROLLER_COMPONENT"; then
		local port
		for port in "$CONTROLLER_WEBHOOK_PORT" "$CONTROLLER_METRICS_PORT"; do
			! ss -ltnH "sport = :$port" 2>/dev/null | grep -q . ||
				die "port $port is already in use; pick others with GPUDRA_CONTROLLER_WEBHOOK_PORT/GPUDRA_CONTROLLER_METRICS_PORT"
		done
	fi
	ensure_controller_identity
	controller_rbac | kubectl_admin apply -f - >/dev/null || die "cannot apply the controller's namespace and RBAC"
	controller_webhook_config | kubectl_admin apply -f - >/dev/null ||
		die "cannot apply ValidatingWebhookConfiguration $CONTROLLER_WEBHOOK_CONFIG"
	start_controller_process
	wait_for "$WAIT_TIMEOUT" "$CONTROLLER_COMPONENT /readyz on :$CONTROLLER_METRICS_PORT" "$CONTROLLER_COMPONENT" controller_ready
	wait_for "$WAIT_TIMEOUT" "the caBundle of $CONTROLLER_WEBHOOK_CONFIG" "$CONTROLLER_COMPONENT" ca_bundle_set
	if [[ -z $CONTROLLER_NAMESPACE_LABEL ]]; then
		wait_for "$WAIT_TIMEOUT" "the webhook to reject an invalid claim" "$CONTROLLER_COMPONENT" webhook_rejects_bad_claim
	fi
	log "$CONTROLLER_COMPONENT ready (pid $(component_pid "$CONTROLLER_COMPONENT")): webhook https://127.0.0.1:$CONTROLLER_WEBHOOK_PORT," \
		"metrics http://127.0.0.1:$CONTROLLER_METRICS_PORT/metrics, log $LOG_DIR/$CONTROLLER_COMPONENT.log"
}

# cmd_stop_controller deletes the webhook configuration first (so that no
# request waits for a webhook that is going away), then stops the process.
# The namespace, RBAC and certificate Secret stay for the next start.
cmd_stop_controller() {
	require_root
	load_settings
	if apiserver_ready; then
		kubectl_admin delete validatingwebhookconfiguration "$CONTROLLER_WEBHOOK_CONFIG" --ignore-not-found >/dev/null ||
			warn "cannot delete ValidatingWebhookConfiguration $CONTROLLER_WEBHOOK_CONFIG"
	fi
	stop_component "$CONTROLLER_COMPONENT" TERM
	log "$CONTROLLER_COMPONENT stopped"
}
