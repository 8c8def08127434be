# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables set here are used by the other files
# Settings of test/cluster/cluster.sh: the environment knobs (documented at
# the top of cluster.sh), the node list and the preflight checks. `up`
# records the effective settings in <cluster-dir>/cluster.env so that later
# commands act on the cluster that runs, whatever their environment says.
# Sourced by cluster.sh.

SETTINGS_VARS=(BIN_DIR NODES ETCD_CLIENT_PORT ETCD_PEER_PORT APISERVER_PORT APISERVER_BIND_ADDRESS
	SCHEDULER_PORT CONTROLLER_MANAGER_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT HOST_IP SERVICE_CIDR
	CONTROLLER_WEBHOOK_PORT CONTROLLER_METRICS_PORT CONTROLLER_NAMESPACE PLUGIN_METRICS_PORT)

# load_settings takes the settings of a running cluster from cluster.env and
# the rest from the GPUDRA_* environment, then checks them.
load_settings() {
	unset "${SETTINGS_VARS[@]}"
	if [[ -r $SETTINGS_FILE ]]; then
		# shellcheck source=/dev/null
		source "$SETTINGS_FILE"
	fi
	BIN_DIR=${BIN_DIR:-${GPUDRA_BIN_DIR:-$REPO_ROOT/_output/bin}}
	NODES=${NODES:-${GPUDRA_NODES:-gpu-h100=dgx-h100 gpu-mixed=mixed}}
	ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-${GPUDRA_ETCD_PORT:-23379}}
	ETCD_PEER_PORT=${ETCD_PEER_PORT:-${GPUDRA_ETCD_PEER_PORT:-23380}}
	APISERVER_PORT=${APISERVER_PORT:-${GPUDRA_APISERVER_PORT:-26443}}
	APISERVER_BIND_ADDRESS=${APISERVER_BIND_ADDRESS:-${GPUDRA_APISERVER_BIND_ADDRESS:-127.0.0.1}}
	SCHEDULER_PORT=${SCHEDULER_PORT:-${GPUDRA_SCHEDULER_PORT:-30259}}
	CONTROLLER_MANAGER_PORT=${CONTROLLER_MANAGER_PORT:-${GPUDRA_CONTROLLER_MANAGER_PORT:-30257}}
	KUBELET_PORT=${KUBELET_PORT:-${GPUDRA_KUBELET_PORT:-30250}}
	KUBELET_HEALTHZ_PORT=${KUBELET_HEALTHZ_PORT:-${GPUDRA_KUBELET_HEALTHZ_PORT:-30280}}
	HOST_IP=${HOST_IP:-${GPUDRA_HOST_IP:-}}
	SERVICE_CIDR=${SERVICE_CIDR:-${GPUDRA_SERVICE_CIDR:-10.0.0.0/24}}
	CONTROLLER_WEBHOOK_PORT=${CONTROLLER_WEBHOOK_PORT:-${GPUDRA_CONTROLLER_WEBHOOK_PORT:-30443}}
	CONTROLLER_METRICS_PORT=${CONTROLLER_METRICS_PORT:-${GPUDRA_CONTROLLER_METRICS_PORT:-30880}}
	CONTROLLER_NAMESPACE=${CONTROLLER_NAMESPACE:-${GPUDRA_CONTROLLER_NAMESPACE:-gpudra-local}}
	PLUGIN_METRICS_PORT=${PLUGIN_METRICS_PORT:-${GPUDRA_PLUGIN_METRICS_PORT:-30900}}
	CONTROLLER_NAMESPACE_LABEL=${GPUDRA_CONTROLLER_WEBHOOK_NAMESPACE_LABEL:-}
	CONTROLLER_VERBOSITY=${GPUDRA_CONTROLLER_V:-4}
	COMPONENT_V=${GPUDRA_V:-2}
	PLUGIN_V=${GPUDRA_PLUGIN_V:-4}
	# --mig of every node's plugin: dynamic, so gpu-h100 partitions on demand
	# and gpu-mixed shows the per-GPU choice (L4 whole, A100 partitionable).
	PLUGIN_MIG=${GPUDRA_PLUGIN_MIG:-dynamic}
	FAKE_CRI_V=${GPUDRA_FAKE_CRI_V:-2}
	WAIT_TIMEOUT=${GPUDRA_WAIT_TIMEOUT:-90}
	STOP_TIMEOUT=${GPUDRA_STOP_TIMEOUT:-10}
	POLL_INTERVAL=0.2

	local pair var
	for pair in ETCD_CLIENT_PORT:ETCD_PORT ETCD_PEER_PORT:ETCD_PEER_PORT APISERVER_PORT:APISERVER_PORT \
		SCHEDULER_PORT:SCHEDULER_PORT CONTROLLER_MANAGER_PORT:CONTROLLER_MANAGER_PORT \
		KUBELET_PORT:KUBELET_PORT KUBELET_HEALTHZ_PORT:KUBELET_HEALTHZ_PORT COMPONENT_V:V \
		PLUGIN_V:PLUGIN_V FAKE_CRI_V:FAKE_CRI_V WAIT_TIMEOUT:WAIT_TIMEOUT STOP_TIMEOUT:STOP_TIMEOUT \
		CONTROLLER_WEBHOOK_PORT:CONTROLLER_WEBHOOK_PORT CONTROLLER_METRICS_PORT:CONTROLLER_METRICS_PORT \
		CONTROLLER_VERBOSITY:CONTROLLER_V PLUGIN_METRICS_PORT:PLUGIN_METRICS_PORT; do
		var=${pair%%:*}
		[[ ${!var} =~ ^[0-9]+$ ]] || die "GPUDRA_${pair#*:} must be a number, not '${!var}'"
	done

	PKI_DIR="$CLUSTER_DIR/pki"
	KUBECONFIG_DIR="$CLUSTER_DIR/kubeconfig"
	ADMIN_KUBECONFIG="$KUBECONFIG_DIR/admin.kubeconfig"
	LOG_DIR="$CLUSTER_DIR/logs"
	PID_DIR="$CLUSTER_DIR/pids"
	[[ $CONTROLLER_NAMESPACE =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] ||
		die "GPUDRA_CONTROLLER_NAMESPACE must be a DNS label, not '$CONTROLLER_NAMESPACE'"
	[[ -z $CONTROLLER_NAMESPACE_LABEL || $CONTROLLER_NAMESPACE_LABEL =~ ^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$ ]] ||
		die "GPUDRA_CONTROLLER_WEBHOOK_NAMESPACE_LABEL must be a label key, not '$CONTROLLER_NAMESPACE_LABEL'"
	parse_nodes
}

# parse_nodes splits NODES ("name=profile ...") into NODE_NAMES/NODE_PROFILES.
parse_nodes() {
	local entry name
	NODE_NAMES=()
	NODE_PROFILES=()
	for entry in $NODES; do
		name=${entry%%=*}
		[[ $entry == *=?* && $name =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] ||
			die "GPUDRA_NODES: '$entry' is not NODE=PROFILE with NODE a DNS label"
		NODE_NAMES+=("$name")
		NODE_PROFILES+=("${entry#*=}")
	done
	((${#NODE_NAMES[@]} > 0)) || die "GPUDRA_NODES names no node"
}

save_settings() {
	local var
	{
		echo "# Settings of the cluster started by test/cluster/cluster.sh up."
		for var in "${SETTINGS_VARS[@]}"; do
			printf '%s=%q\n' "$var" "${!var}"
		done
	} >"$SETTINGS_FILE"
}

detect_host_ip() {
	if [[ -z $HOST_IP ]]; then
		HOST_IP=$(ip -4 route get 1.1.1.1 2>/dev/null |
			awk '{ for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit } }') || true
	fi
	if [[ -z $HOST_IP ]]; then
		HOST_IP=$(hostname -I 2>/dev/null | awk '{ print $1 }') || true
	fi
	[[ -n $HOST_IP && $HOST_IP != 127.* ]] ||
		die "cannot find a non-loopback IP of this host (the kubelets reject loopback); set GPUDRA_HOST_IP"
	local net=${SERVICE_CIDR%/*}
	SERVICE_IP="${net%.*}.$((${net##*.} + 1))"
}

# check_ports fails when two settings share a port or a port is taken.
check_ports() {
	local ports=("$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$SCHEDULER_PORT"
		"$CONTROLLER_MANAGER_PORT") i port listening
	for i in "${!NODE_NAMES[@]}"; do
		ports+=($((KUBELET_PORT + i)) $((KUBELET_HEALTHZ_PORT + i)) $((PLUGIN_METRICS_PORT + i)))
	done
	# The controller's ports must not overlap; they are only checked for use
	# when start-controller runs.
	if [[ $(printf '%s\n' "${ports[@]}" "$CONTROLLER_WEBHOOK_PORT" "$CONTROLLER_METRICS_PORT" | sort | uniq -d) ]]; then
		die "port settings overlap: ${ports[*]} $CONTROLLER_WEBHOOK_PORT $CONTROLLER_METRICS_PORT (see GPUDRA_*_PORT in $0)"
	fi
	listening=$(ss -ltnH 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }')
	for port in "${ports[@]}"; do
		if grep -qx "$port" <<<"$listening"; then
			die "port $port is already in use; pick other ports with the GPUDRA_*_PORT variables"
		fi
	done
}
