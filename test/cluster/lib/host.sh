# shellcheck shell=bash
# What the kubelets change outside the cluster dir, whatever their flags say:
#   - /var/log/containers/: a symlink per container log (path fixed in the
#     kubelet);
#   - /var/lib/kubelet/device-plugins/kubelet.sock: the device-plugin
#     registration socket (path fixed too; our kubelets take turns owning it,
#     which is harmless as no device plugin runs);
#   - kernel tunables the kubelet sets at start (vm.overcommit_memory,
#     kernel.panic, ...);
#   - /driver-root: the empty directory on which each plugin's own mount
#     namespace mounts its node's driver root, where the chart mounts it.
# `up` records the state before the first kubelet starts (host.env) and
# `down` puts it back: links, directories and socket it made are removed and
# the tunables get their old values. Sourced by cluster.sh.

CONTAINER_LOG_LINKS_DIR=/var/log/containers
HOST_KUBELET_DIR=/var/lib/kubelet
DEVICE_PLUGIN_SOCKET=$HOST_KUBELET_DIR/device-plugins/kubelet.sock
# The tunables of the kubelet's container manager (setupKernelTunables).
KUBELET_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
# The chart's mount path of the driver root (start_plugin checks it).
CHART_DRIVER_ROOT_MOUNT=/driver-root
# Directories the kubelets and plugins may create, parents first.
HOST_DIRS=("$CONTAINER_LOG_LINKS_DIR" "$HOST_KUBELET_DIR" "$HOST_KUBELET_DIR/device-plugins" "$CHART_DRIVER_ROOT_MOUNT")

host_state_file() { echo "$CLUSTER_DIR/host.env"; }

# host_var NAME turns a path into a shell variable name.
host_var() {
	local v=${1//[^a-zA-Z0-9]/_}
	echo "H_${v#_}"
}

# check_host fails when a kubelet that is not ours serves the fixed
# device-plugin socket: our kubelets would take it over.
check_host() {
	# Another gpudra dev cluster (GPUDRA_SHARED_HOST=1) may own it: harmless.
	[[ ${GPUDRA_SHARED_HOST:-0} == 1 ]] && return 0
	if socket_accepts "$DEVICE_PLUGIN_SOCKET"; then
		die "another kubelet serves $DEVICE_PLUGIN_SOCKET on this host; the test kubelets would take it over"
	fi
}

# save_host_state records which directories exist and the tunables.
save_host_state() {
	local file dir key
	file=$(host_state_file)
	[[ -e $file ]] && return 0
	{
		echo "# Host state before the cluster's kubelets started; 'down' restores it."
		for dir in "${HOST_DIRS[@]}"; do
			printf '%s=%d\n' "$(host_var "$dir")" "$([[ -e $dir ]] && echo 1 || echo 0)"
		done
		for key in "${KUBELET_SYSCTLS[@]}"; do
			if [[ -r /proc/sys/$key ]]; then
				printf '%s=%q\n' "$(host_var "$key")" "$(<"/proc/sys/$key")"
			fi
		done
	} >"$file"
}

# restore_host_state undoes what the kubelets did; the processes are gone.
restore_host_state() {
	local file link dir key var i
	file=$(host_state_file)
	[[ -r $file ]] || return 0
	# shellcheck source=/dev/null
	source "$file"
	for link in "$CONTAINER_LOG_LINKS_DIR"/*.log; do
		if [[ -L $link && $(readlink "$link") == "$CLUSTER_DIR/"* ]]; then
			rm -f "$link"
		fi
	done
	var=$(host_var "$HOST_KUBELET_DIR/device-plugins")
	if [[ ${!var:-1} == 0 && -S $DEVICE_PLUGIN_SOCKET ]]; then
		rm -f "$DEVICE_PLUGIN_SOCKET"
	fi
	for ((i = ${#HOST_DIRS[@]} - 1; i >= 0; i--)); do
		dir=${HOST_DIRS[$i]}
		var=$(host_var "$dir")
		if [[ ${!var:-1} == 0 && -d $dir ]]; then
			rmdir "$dir" 2>/dev/null || warn "$dir is not empty, left in place"
		fi
	done
	for key in "${KUBELET_SYSCTLS[@]}"; do
		var=$(host_var "$key")
		if [[ -n ${!var:-} && -w /proc/sys/$key && $(<"/proc/sys/$key") != "${!var}" ]]; then
			echo "${!var}" >"/proc/sys/$key" || warn "cannot restore ${key//\//.}"
		fi
	done
	rm -f "$file"
}
