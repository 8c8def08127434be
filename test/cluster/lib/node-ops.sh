# shellcheck shell=bash
# Adding and removing simulated GPU nodes on a running cluster: add-node
# starts a fake CRI runtime, a kubelet and a plugin for a new node with the
# same per-node functions as `up`; remove-node stops them and removes the
# node from the API and from disk. The node list in cluster.env follows, so
# that status, stop/start-plugin and down know the added nodes. Sourced by
# cluster.sh.

# node_slot NODE prints the port slot of a node: its kubelet listens on
# KUBELET_PORT + slot and KUBELET_HEALTHZ_PORT + slot. `up` gives the nodes
# the slots 0, 1, ...; add-node the first free one. Clusters started before
# slots were recorded use the position in the node list.
node_slot() {
	local file
	file="$(node_dir "$1")/slot"
	if [[ -r $file ]]; then
		cat "$file"
	else
		node_index "$1"
	fi
}

# used_slots lists the slots of the kubelets configured so far, read back
# from their configurations (positions in the list shift when a node goes).
used_slots() {
	local cfg port
	for cfg in "$CLUSTER_DIR"/nodes/*/kubelet-config.yaml; do
		[[ -r $cfg ]] || continue
		port=$(awk '$1 == "port:" { print $2; exit }' "$cfg")
		[[ $port =~ ^[0-9]+$ ]] && echo $((port - KUBELET_PORT))
	done
}

# free_slot prints the lowest slot no kubelet uses and whose two ports are
# free on the host.
free_slot() {
	local used listening slot
	used=$(used_slots)
	listening=$(ss -ltnH 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }')
	for ((slot = 0; slot < 100; slot++)); do
		grep -qx "$slot" <<<"$used" && continue
		grep -qx "$((KUBELET_PORT + slot))" <<<"$listening" && continue
		grep -qx "$((KUBELET_HEALTHZ_PORT + slot))" <<<"$listening" && continue
		echo "$slot"
		return 0
	done
	die "no free kubelet port pair from $KUBELET_PORT/$KUBELET_HEALTHZ_PORT on; remove nodes or change GPUDRA_KUBELET_*PORT"
}

# ensure_node_identity NODE signs the node's client certificate and writes
# its kubeconfig unless they exist.
ensure_node_identity() {
	local node=$1
	[[ -s $(node_kubeconfig "$node") ]] && return 0
	sign_cert "node-$node" "/O=system:nodes/CN=system:node:$node" clientAuth
	write_kubeconfig "$(node_kubeconfig "$node")" "system:node:$node" "node-$node"
}

# start_node NODE starts the runtime, the kubelet and the plugin of one
# node and waits until its ResourceSlice is published.
start_node() {
	local node=$1
	start_fake_cri "$node"
	wait_for "$WAIT_TIMEOUT" "the fake CRI socket of $node" "fake-cri-$node" socket_accepts "$(cri_socket "$node")"
	start_kubelet "$node"
	wait_for "$WAIT_TIMEOUT" "node $node to register" "kube-apiserver kubelet-$node" node_registered "$node"
	start_plugin "$node"
	wait_for "$WAIT_TIMEOUT" "node $node Ready without the not-ready taint" "kubelet-$node" node_ready "$node"
	wait_plugin "$node"
	wait_registered "$node" 0
	wait_for "$WAIT_TIMEOUT" "the ResourceSlice of $node (driver $DRIVER_NAME, pool $node)" \
		"kubelet-$node plugin-$node" slice_published "$node"
}

cmd_add_node() {
	local spec=${1:-} node profile
	[[ $spec == ?*=?* ]] || die "usage: $0 add-node NAME=PROFILE [PLUGIN-FLAG...], e.g. gpu-h200=h200 (a simulation profile: a built-in name or a file)"
	shift
	node=${spec%%=*} profile=${spec#*=}
	[[ $node =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] ||
		die "add-node: node name '$node' must be a DNS label (lower-case letters, digits and '-')"
	require_root
	load_settings
	apiserver_ready || die "the cluster is not running; start it with 'make cluster-up'"
	if [[ " ${NODE_NAMES[*]} " == *" $node "* ]]; then
		[[ $(node_profile "$node") == "$profile" ]] ||
			die "node $node already runs profile $(node_profile "$node"); remove-node $node first"
		if is_running "fake-cri-$node" && is_running "kubelet-$node" && is_running "plugin-$node"; then
			log "node $node ($profile) already running"
			return 0
		fi
		die "node $node is only partly running (see '$0 status'); remove-node $node, then add it again"
	fi
	NODES="$NODES $spec"
	parse_nodes
	check_socket_paths
	# shellcheck disable=SC2034 # read by elapsed (common.sh)
	START_MS=$(now_ms)
	mkdir -p "$(node_dir "$node")"
	free_slot >"$(node_dir "$node")/slot"
	# Extra plugin flags of this node (e.g. --gpu-sharing=consumable); start_plugin reads them.
	if (($# > 0)); then printf '%s\n' "$@" >"$(node_dir "$node")/plugin-flags"; fi
	trap 'on_add_node_exit "$node"' EXIT
	write_gpu_info "$node"
	ensure_node_identity "$node"
	save_settings # from here on status and down know the node
	log "adding node $node (profile $profile, kubelet port $((KUBELET_PORT + $(node_slot "$node"))))"
	start_node "$node"
	trap - EXIT
	log "node $node Ready, plugin registered, ResourceSlice published in $(elapsed)s"
}

# on_add_node_exit undoes a failed add-node, keeping the node's logs.
on_add_node_exit() {
	local rc=$? node=$1
	((rc == 0)) && return 0
	warn "adding node $node failed; removing it again (logs stay in $LOG_DIR/)"
	remove_node_now "$node" || true
	forget_node "$node"
	exit "$rc"
}

cmd_remove_node() {
	local node=${1:-}
	[[ -n $node ]] || die "usage: $0 remove-node NAME"
	require_root
	load_settings
	if [[ " ${NODE_NAMES[*]} " != *" $node "* ]]; then
		log "node $node is not part of the cluster (nodes: ${NODE_NAMES[*]})"
		return 0
	fi
	((${#NODE_NAMES[@]} > 1)) || die "$node is the last node; use '$0 down' to stop the whole cluster"
	# shellcheck disable=SC2034 # read by elapsed (common.sh)
	START_MS=$(now_ms)
	remove_node_now "$node"
	forget_node "$node"
	log "node $node removed in $(elapsed)s (nodes: ${NODE_NAMES[*]})"
}

# remove_node_now stops a node's processes, deletes its ResourceSlices and
# Node object (the pod garbage collector then deletes pods bound to it),
# unmounts and removes its directory, links and credentials.
remove_node_now() {
	local node=$1 dir link
	dir=$(node_dir "$node")
	stop_component "plugin-$node"
	stop_component "kubelet-$node"
	stop_component "fake-cri-$node"
	if apiserver_ready; then
		kubectl_admin delete resourceslices --field-selector "spec.nodeName=$node" --ignore-not-found >/dev/null ||
			warn "cannot delete the ResourceSlices of $node"
		kubectl_admin delete node "$node" --ignore-not-found >/dev/null || warn "cannot delete Node $node"
	else
		warn "apiserver not ready: Node $node and its ResourceSlices stay in the API"
	fi
	unmount_all "$dir"
	for link in "$CONTAINER_LOG_LINKS_DIR"/*.log; do
		if [[ -L $link && $(readlink "$link") == "$dir/"* ]]; then
			rm -f "$link"
		fi
	done
	rm -rf "$dir"
	rm -f "$PKI_DIR/node-$node.crt" "$PKI_DIR/node-$node.key" "$(node_kubeconfig "$node")"
}

# forget_node drops a node from the recorded node list.
forget_node() {
	local node=$1 entry kept=()
	for entry in $NODES; do
		[[ ${entry%%=*} == "$node" ]] || kept+=("$entry")
	done
	NODES="${kept[*]}"
	parse_nodes
	save_settings
}
