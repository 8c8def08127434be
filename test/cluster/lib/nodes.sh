# shellcheck shell=bash
# The simulated GPU nodes: per node a fake CRI runtime, a kubelet and the
# gpudra kubelet plugin on a simulated driver root of the node's GPU profile
# (a fake NVIDIA driver installation: test/fakedriver), all under
# nodes/<node>/. The plugin runs the way the chart's DaemonSet runs it: the
# chart's own flags (helm template), its own mount namespace in which the
# node's driver root is mounted at the chart's /driver-root while the host
# path is nodes/<node>/driver-root, and its own PID namespace. Sourced by
# cluster.sh.

node_dir() { echo "$CLUSTER_DIR/nodes/$1"; }
driver_root() { echo "$(node_dir "$1")/driver-root"; }
kubelet_root() { echo "$(node_dir "$1")/kubelet"; }
# With POD_UID set (a rolling-update instance, gpu-kubelet-plugin --pod-uid)
# the helper puts the UID into both socket names.
reg_socket() { echo "$(kubelet_root "$1")/plugins_registry/$DRIVER_NAME${POD_UID:+-$POD_UID}-reg.sock"; }
dra_socket() { echo "$(kubelet_root "$1")/plugins/$DRIVER_NAME/dra${POD_UID:+-$POD_UID}.sock"; }
cri_socket() { echo "$(node_dir "$1")/cri.sock"; }

# node_profile NODE prints the simulated GPU profile of a node.
node_profile() {
	local i
	for i in "${!NODE_NAMES[@]}"; do
		if [[ ${NODE_NAMES[$i]} == "$1" ]]; then
			echo "${NODE_PROFILES[$i]}"
			return 0
		fi
	done
	die "unknown node '$1' (nodes: ${NODE_NAMES[*]})"
}

# node_index NODE prints the position of a node in the node list; it picks
# the node's ports.
node_index() {
	local i
	for i in "${!NODE_NAMES[@]}"; do
		[[ ${NODE_NAMES[$i]} == "$1" ]] && echo "$i" && return 0
	done
	die "unknown node '$1' (nodes: ${NODE_NAMES[*]})"
}

# check_socket_paths fails early when a unix socket path would exceed the
# kernel's 107-character limit (a deep checkout or a long node name).
check_socket_paths() {
	local node path
	for node in "${NODE_NAMES[@]}"; do
		for path in "$(reg_socket "$node")" "$(dra_socket "$node")" \
			"$(kubelet_root "$node")/pod-resources/kubelet.sock"; do
			((${#path} <= 107)) ||
				die "socket path too long (${#path} > 107): $path; set GPUDRA_CLUSTER_DIR to a shorter dir"
		done
	done
}

# prepare_nodes checks every node's profile before anything starts and
# gives the nodes their port slots (see node_slot) in list order.
prepare_nodes() {
	local i
	for i in "${!NODE_NAMES[@]}"; do
		write_gpu_info "${NODE_NAMES[$i]}"
		echo "$i" >"$(node_dir "${NODE_NAMES[$i]}")/slot"
	done
}

# write_driver_root NODE creates (or refreshes) the node's simulated driver
# root from its profile: the simulated libnvidia-ml, stub driver files,
# harmless device nodes, /proc and /sys entries (make fake-driver-root).
write_driver_root() {
	local node=$1
	mkdir -p "$(node_dir "$node")"
	"$BIN_DIR/gpudra-fake-driver-root" --dir "$(driver_root "$node")" --profile "$(node_profile "$node")" \
		--node "$node" --nvml-library "$SIM_NVML_LIB" --tools-dir "$BIN_DIR" \
		>>"$LOG_DIR/driver-root-$node.log" 2>&1 ||
		fail_component "driver-root-$node" "gpudra-fake-driver-root for $node ($(node_profile "$node")) failed"
}

# write_gpu_info NODE writes nodes/<node>/gpus.json, the UUID -> product name
# table the fake runtime prints in container logs, from what the plugin
# discovers on the node's driver root (inspect runs the plugin's real path).
write_gpu_info() {
	local node=$1 dir out
	dir=$(node_dir "$node")
	write_driver_root "$node"
	out=$("$BIN_DIR/gpu-kubelet-plugin" inspect --nvidia-driver-root "$(driver_root "$node")" \
		--node-name "$node" -o json 2>>"$LOG_DIR/inspect-$node.log") ||
		fail_component "inspect-$node" "gpu-kubelet-plugin inspect --nvidia-driver-root=$(driver_root "$node") failed"
	python3 -c 'import json, sys; json.dump(json.load(sys.stdin)["node"], sys.stdout, indent=1)' \
		<<<"$out" >"$dir/gpus.json" || die "unexpected output of gpu-kubelet-plugin inspect for $node"
}

start_fake_cri() {
	local node=$1 dir
	dir=$(node_dir "$node")
	mkdir -p "$dir/cdi"
	start_component "fake-cri-$node" "$BIN_DIR/gpudra-fake-cri" \
		--listen "$(cri_socket "$node")" \
		--cdi-spec-dir "$dir/cdi" \
		--gpu-info "$dir/gpus.json" \
		--state-file "$dir/containers.jsonl" \
		--sim-process-dir "$(driver_root "$node")/var/lib/gpudra-sim/processes" \
		-v "$FAKE_CRI_V"
}

# write_kubelet_config NODE writes the KubeletConfiguration for a kubelet on
# the fake runtime, sharing the host with the other kubelets.
write_kubelet_config() {
	local node=$1 idx dir
	idx=$(node_slot "$node")
	dir=$(node_dir "$node")
	cat >"$dir/kubelet-config.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		containerRuntimeEndpoint: unix://$(cri_socket "$node")
		address: $HOST_IP
		port: $((KUBELET_PORT + idx))
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		healthzPort: $((KUBELET_HEALTHZ_PORT + idx))
		podLogsDir: $dir/pod-logs
		# Nothing really runs: no QoS cgroups, no node-allocatable enforcement,
		# no eviction thresholds, no swap check, no host resolv.conf, and the
		# kubelet must accept a cgroup v1 host.
		failCgroupV1: false
		cgroupDriver: cgroupfs
		cgroupsPerQOS: false
		enforceNodeAllocatable: []
		failSwapOn: false
		evictionHard: {}
		resolvConf: ""
		# THROW-AWAY TEST CLUSTER ONLY: any client with a certificate of the
		# cluster CA (the apiserver for logs/exec) may do anything here.
		authentication:
		  anonymous:
		    enabled: false
		  webhook:
		    enabled: false
		  x509:
		    clientCAFile: $PKI_DIR/ca.crt
		authorization:
		  mode: AlwaysAllow
	EOF
}

start_kubelet() {
	local node=$1 dir
	dir=$(node_dir "$node")
	mkdir -p "$dir/kubelet" "$dir/pod-logs"
	write_kubelet_config "$node"
	start_component "kubelet-$node" "$BIN_DIR/kubelet" \
		--config "$dir/kubelet-config.yaml" \
		--kubeconfig "$(node_kubeconfig "$node")" \
		--root-dir "$dir/kubelet" \
		--cert-dir "$dir/kubelet/pki" \
		--hostname-override "$node" \
		--node-ip "$HOST_IP" \
		--v "$COMPONENT_V"
}

# chart_plugin_args NODE writes the plugin's arguments as the chart renders
# them for this node (nodes/<node>/plugin-chart-args, one per line) and the
# driver root's mount path in the pod (nodes/<node>/plugin-driver-root-mount):
# the node's kubelet root, CDI directory and driver root as chart values,
# the cluster's --mig, verbosity and unprivileged simulated root.
chart_plugin_args() {
	local node=$1 dir out
	dir=$(node_dir "$node")
	out=$("$HELM" template gpudra "$REPO_ROOT/deployments/helm/gpudra" --namespace gpudra-system \
		--show-only templates/kubelet-plugin/daemonset.yaml \
		--set-string nvidiaDriverRoot="$(driver_root "$node")" --set-string kubeletRoot="$dir/kubelet" \
		--set-string cdiRoot="$dir/cdi" --set-string kubeletPlugin.mig="$PLUGIN_MIG" \
		--set kubeletPlugin.logVerbosity="$PLUGIN_V" --set kubeletPlugin.privileged=false \
		--set-string kubeletPlugin.nvidiaCDIHookPath="$(driver_root "$node")/usr/bin/nvidia-cdi-hook" \
		2>>"$LOG_DIR/helm-$node.log") || fail_component "helm-$node" "helm template of the chart failed"
	"$BIN_DIR/gpudra-chart-args" <<<"$out" >"$dir/plugin-chart-args" ||
		die "cannot read the plugin's arguments from the chart"
	"$BIN_DIR/gpudra-chart-args" -mount-path driver-root <<<"$out" >"$dir/plugin-driver-root-mount" ||
		die "cannot read the driver root's mount path from the chart"
}

# start_plugin NODE runs the plugin in the chart's shape: in new mount and
# PID namespaces (unshare), the node's driver root bind-mounted at the
# chart's mount path (an empty directory made on the host for it), the
# chart's arguments, then what differs because every plugin shares the host:
# the node name (the downward API in a pod), a kubeconfig (in-cluster config
# in a pod), a metrics port of its own (a pod has its own network), and the
# node's extra flags, which override the chart's.
start_plugin() {
	local node=$1 dir mnt chart=() extra=()
	dir=$(node_dir "$node")
	[[ -s $dir/plugin-chart-args ]] || chart_plugin_args "$node"
	mapfile -t chart <"$dir/plugin-chart-args"
	mnt=$(<"$dir/plugin-driver-root-mount")
	[[ $mnt == "$CHART_DRIVER_ROOT_MOUNT" ]] ||
		die "the chart mounts the driver root at $mnt, the cluster's host state expects $CHART_DRIVER_ROOT_MOUNT (lib/host.sh)"
	mkdir -p "$mnt"
	[[ -f $dir/plugin-flags ]] && mapfile -t extra <"$dir/plugin-flags"
	start_component "plugin-$node" unshare --mount --pid --fork --mount-proc --propagation private -- \
		"$REPO_ROOT/test/cluster/lib/in-pod.sh" "$(driver_root "$node")" "$mnt" \
		"${GPUDRA_PLUGIN_BIN:-$BIN_DIR/gpu-kubelet-plugin}" \
		"${chart[@]}" \
		--node-name "$node" \
		--kubeconfig "$(node_kubeconfig "$node")" \
		--metrics-address "127.0.0.1:$(plugin_metrics_port "$node")" \
		"${extra[@]}"
}

plugin_serving() { socket_accepts "$(reg_socket "$1")" && socket_accepts "$(dra_socket "$1")"; }

wait_plugin() {
	local node=$1
	wait_for "$WAIT_TIMEOUT" "the plugin sockets of $node" "plugin-$node" plugin_serving "$node"
}

# kubelet_registrations NODE counts the completed registrations of our
# driver in the node's kubelet log (-v 2 lines): a "RegisterPlugin started"
# for the registration socket followed by a "Connection changed ...
# connected=true". A connection alone does not count: after a kill -9 the
# kubelet's channel of the old registration briefly reconnects to the new
# process's dra.sock, then the kubelet unregisters the old plugin and
# registers the new one, and only from then on can it prepare claims.
kubelet_registrations() {
	awk -v sock="$(reg_socket "$1")" -v drv="driverName=\"$DRIVER_NAME\"" '
		index($0, "\"OperationExecutor.RegisterPlugin started\"") && index($0, sock) { n++; up = 0 }
		index($0, "\"Connection changed\"") && index($0, drv) { up = index($0, "connected=true") > 0 }
		END { print (n > 0 && !up) ? n - 1 : n + 0 }
	' "$LOG_DIR/kubelet-$1.log" 2>/dev/null || echo 0
}

registered_more_than() { (($(kubelet_registrations "$1") > $2)); }

# wait_registered NODE COUNT waits until the kubelet has registered the
# plugin more than COUNT times, so that pods can be prepared right away.
wait_registered() {
	local node=$1 count=$2
	if ((COMPONENT_V < 2)); then
		return 0 # the kubelet does not log the registration
	fi
	wait_for "$WAIT_TIMEOUT" "kubelet-$node to register the plugin" \
		"plugin-$node kubelet-$node" registered_more_than "$node" "$count"
}

# --- checks through the API -------------------------------------------------

kubectl_admin() {
	"$BIN_DIR/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --cache-dir "$CLUSTER_DIR/kubectl-cache" \
		--request-timeout 5s "$@"
}

node_registered() { kubectl_admin get node "$1" -o name; }

# node_ready: the Ready condition is True and the node-lifecycle controller
# has lifted the not-ready taint.
node_ready() {
	local out
	out=$(kubectl_admin get node "$1" -o \
		jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}') || return 1
	[[ $out == True* && $out != *node.kubernetes.io/not-ready* ]]
}

# slice_published: a ResourceSlice of our driver with the node's pool.
slice_published() {
	kubectl_admin get resourceslices -o \
		jsonpath='{range .items[*]}{.spec.driver}/{.spec.pool.name}{"\n"}{end}' |
		grep -qx "$DRIVER_NAME/$1"
}

default_sa_exists() { kubectl_admin -n default get serviceaccount default -o name; }

# --- node lifecycle ---------------------------------------------------------

# up_nodes starts every node's runtime, kubelet and plugin. The plugin starts
# once its Node object exists, so that its ResourceSlice can name its owner.
up_nodes() {
	local node
	for node in "${NODE_NAMES[@]}"; do
		start_fake_cri "$node"
	done
	for node in "${NODE_NAMES[@]}"; do
		wait_for "$WAIT_TIMEOUT" "the fake CRI socket of $node" "fake-cri-$node" \
			socket_accepts "$(cri_socket "$node")"
		start_kubelet "$node"
	done
	log "fake CRI runtimes up, kubelets starting: ${NODE_NAMES[*]}"
	for node in "${NODE_NAMES[@]}"; do
		wait_for "$WAIT_TIMEOUT" "node $node to register" "kube-apiserver kubelet-$node" node_registered "$node"
		start_plugin "$node"
	done
	log "nodes registered, plugins starting"
}

wait_nodes() {
	local node
	for node in "${NODE_NAMES[@]}"; do
		wait_for "$WAIT_TIMEOUT" "node $node Ready without the not-ready taint" \
			"kube-controller-manager kubelet-$node" node_ready "$node"
	done
	log "nodes Ready: ${NODE_NAMES[*]}"
	for node in "${NODE_NAMES[@]}"; do
		wait_plugin "$node"
		wait_registered "$node" 0
		wait_for "$WAIT_TIMEOUT" "the ResourceSlice of $node (driver $DRIVER_NAME, pool $node)" \
			"kubelet-$node plugin-$node" slice_published "$node"
	done
	log "plugins registered with their kubelets, ResourceSlices published"
}

node_components() {
	local node
	for node in "${NODE_NAMES[@]}"; do
		echo "fake-cri-$node" "kubelet-$node" "plugin-$node"
	done
}
