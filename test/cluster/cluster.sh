#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Starts and stops a real local Kubernetes cluster without Docker for
# gpudra's end-to-end tests: etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager and, per simulated GPU node, a fake CRI runtime
# (gpudra-fake-cri), a kubelet and the gpudra kubelet plugin on a simulated
# GPU profile. Every process runs in its own session with a PID file and a
# log under <cluster-dir>/logs/. Needs root (the kubelets mount).
#
# Usage: cluster.sh up | down | status | kubeconfig
#        cluster.sh stop-plugin NODE | start-plugin NODE | restart-plugin NODE
#        cluster.sh start-controller | stop-controller
#        cluster.sh add-node NODE=PROFILE [PLUGIN-FLAG...] | remove-node NODE
#        cluster.sh inject-fault NODE GPU xid N|ecc|lost|thermal | clear-faults NODE
#        cluster.sh stop-apiserver | start-apiserver
#
#   up              build missing binaries, make the PKI, start everything and
#                   wait until the nodes are Ready and their ResourceSlices are
#                   published; a running cluster is left as it is
#   down            stop every process, unmount, remove the cluster dir
#   status          which components are running (exit 1 unless all are)
#   kubeconfig      print the admin kubeconfig path, nothing else
#   stop-plugin     stop one node's plugin (SIGTERM, then SIGKILL after 10s)
#   start-plugin    start it again and wait until it serves its sockets
#   restart-plugin  kill -9 one node's plugin, start it again and wait
#   start-controller  run _output/bin/gpu-controller on the host (dedicated
#                   identity, namespace GPUDRA_CONTROLLER_NAMESPACE, webhook
#                   on https://127.0.0.1:<webhook port>, self-managed
#                   certificate, DeviceClasses with nvidia.com/gpu); create
#                   the ValidatingWebhookConfiguration gpudra-local-controller
#                   (failurePolicy Ignore) and wait until the controller is
#                   ready, the caBundle is set and the webhook rejects an
#                   invalid claim (a server-side dry run); a running
#                   controller is kept, the configuration applied again
#   stop-controller delete that webhook configuration, stop the controller
#   stop-apiserver  stop kube-apiserver (SIGTERM), leaving everything else
#                   running (fault tests: an API outage)
#   start-apiserver start it again and wait until /readyz answers
#   add-node        start the runtime, kubelet and plugin of one more node
#                   (its own ports and dirs) and wait for its ResourceSlice;
#                   PLUGIN-FLAGs are extra gpu-kubelet-plugin flags of that
#                   node (kept in nodes/<node>/plugin-flags for restarts;
#                   they override the cluster's defaults such as --mig), e.g.
#                   add-node gpu-share=h100x1.yaml --gpu-sharing=consumable --mig=static
#   remove-node     stop a node's processes, delete its Node object and
#                   ResourceSlices, unmount and remove its dir
#   inject-fault    break a simulated GPU: append "GPU xid N" (or "GPU ecc",
#                   "GPU lost") to the fault file of the node's simulated
#                   driver root (its libnvidia-ml applies it), e.g.
#                   inject-fault gpu-h100 gpu-3 xid 79
#   clear-faults    empty that file: the node's GPUs are reset
#
# Environment (defaults in brackets). `up` records the effective settings in
# <cluster-dir>/cluster.env and the other commands use those.
#   GPUDRA_CLUSTER_DIR           state, PKI, logs [<repo>/_output/cluster]
#   GPUDRA_BIN_DIR               binaries [<repo>/_output/bin]
#   GPUDRA_SIM_NVML_LIBRARY      simulated libnvidia-ml of the nodes' driver
#                                roots [<repo>/_output/lib/libnvidia-ml-sim.so]
#   GPUDRA_HELM                  helm, renders the plugin's flags from the chart
#                                [<repo>/_output/tools/helm]
#   GPUDRA_NODES                 NODE=PROFILE list, simulation profiles (a
#                                built-in name or a file, as in make fake-driver-root)
#                                ["gpu-h100=dgx-h100 gpu-mixed=mixed"]
#   GPUDRA_ETCD_PORT             etcd client port [23379]
#   GPUDRA_ETCD_PEER_PORT        etcd peer port [23380]
#   GPUDRA_APISERVER_PORT        kube-apiserver secure port [26443]
#   GPUDRA_APISERVER_BIND_ADDRESS  its bind address; the kubeconfigs use
#                                127.0.0.1, so 127.0.0.1 or 0.0.0.0 [127.0.0.1]
#   GPUDRA_SCHEDULER_PORT        kube-scheduler secure port [30259]
#   GPUDRA_CONTROLLER_MANAGER_PORT kube-controller-manager secure port [30257]
#   GPUDRA_KUBELET_PORT          first kubelet's port, +1 per node slot [30250]
#   GPUDRA_KUBELET_HEALTHZ_PORT  first kubelet's healthz port, +1 per slot [30280]
#   GPUDRA_HOST_IP               node IP and apiserver advertise address
#                                [source address of the default route]
#   GPUDRA_SERVICE_CIDR          service IP range [10.0.0.0/24]
#   GPUDRA_SCHEDULER_QPS         kube-scheduler client QPS (burst: twice that),
#                                read when the scheduler starts [stock: 50]
#   GPUDRA_V                     klog verbosity of the Kubernetes components [2]
#   GPUDRA_PLUGIN_V              verbosity of gpu-kubelet-plugin [4]
#   GPUDRA_PLUGIN_MIG            --mig of gpu-kubelet-plugin: off|static|dynamic [dynamic]
#   GPUDRA_FAKE_CRI_V            verbosity of gpudra-fake-cri [2]
#   GPUDRA_CONTROLLER_WEBHOOK_PORT gpu-controller webhook port [30443]
#   GPUDRA_CONTROLLER_METRICS_PORT its /metrics, /healthz, /readyz port [30880]
#   GPUDRA_PLUGIN_METRICS_PORT   first plugin's /metrics port (127.0.0.1), +1
#                                per node slot [30900]
#   GPUDRA_CONTROLLER_NAMESPACE  its namespace (certificate Secret) [gpudra-local]
#   GPUDRA_CONTROLLER_V          its verbosity [4]
#   GPUDRA_CONTROLLER_WEBHOOK_NAMESPACE_LABEL  set: the webhook only checks
#                                namespaces with this label key (start-controller
#                                reads it each time; the e2e tests use it so
#                                that other tests' namespaces are not checked)
#                                [unset: every namespace but kube-system]
#   GPUDRA_WAIT_TIMEOUT          seconds allowed per readiness step [90]
#   GPUDRA_STOP_TIMEOUT          seconds between SIGTERM and SIGKILL [10]
#   GPUDRA_BUILD                 auto: build only missing binaries; always:
#                                also rerun `make build`; never [auto]
#   GPUDRA_SHARED_HOST           1: start even if another kubelet serves the
#                                host's device-plugin socket (a second dev
#                                cluster, e.g. from hack/cluster-slot.sh) [0]
#   GPUDRA_PLUGIN_BIN            plugin binary that start-plugin / restart-plugin
#                                run, e.g. a -tags failpoints build
#                                [<bin dir>/gpu-kubelet-plugin]
#   GPUDRA_FAILPOINTS            passed to the plugins (failpoints builds only)
#   POD_UID                      passed to the plugins: rolling-update mode,
#                                sockets named after it (keep it short: a
#                                Unix socket path has at most 107 bytes)
#   GPUDRA_KEEP_LOGS             1: `down` copies the logs to
#                                <cluster-dir>-logs/ before removing the dir [0]
#   GPUDRA_KEEP_ON_FAILURE       1: a failed `up` leaves the processes running
#                                for inspection instead of tearing down [0]
# A failed `up` always copies the logs to <cluster-dir>-logs/.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
# shellcheck source=lib/common.sh
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$SCRIPT_DIR/lib/settings.sh"
# shellcheck source=lib/host.sh
source "$SCRIPT_DIR/lib/host.sh"
# shellcheck source=lib/pki.sh
source "$SCRIPT_DIR/lib/pki.sh"
# shellcheck source=lib/control-plane.sh
source "$SCRIPT_DIR/lib/control-plane.sh"
# shellcheck source=lib/nodes.sh
source "$SCRIPT_DIR/lib/nodes.sh"
# shellcheck source=lib/node-ops.sh
source "$SCRIPT_DIR/lib/node-ops.sh"
# shellcheck source=lib/controller.sh
source "$SCRIPT_DIR/lib/controller.sh"
# shellcheck source=lib/health.sh
source "$SCRIPT_DIR/lib/health.sh"

DRIVER_NAME=gpu.gpudra.io
K8S_BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl)
GPUDRA_BINARIES=(gpu-kubelet-plugin gpudra-fake-cri gpu-controller gpudra-fake-driver-root gpudra-chart-args
	gpudra-fake-nvidia-smi gpudra-fake-mps-control)
# The simulated libnvidia-ml of the nodes' driver roots and the Helm binary
# that renders the plugin's arguments from the chart (both built by make).
SIM_NVML_LIB=${GPUDRA_SIM_NVML_LIBRARY:-$REPO_ROOT/_output/lib/libnvidia-ml-sim.so}
HELM=${GPUDRA_HELM:-$REPO_ROOT/_output/tools/helm}

CLUSTER_DIR=${GPUDRA_CLUSTER_DIR:-$REPO_ROOT/_output/cluster}
CLUSTER_DIR=${CLUSTER_DIR%/}
SETTINGS_FILE="$CLUSTER_DIR/cluster.env"

all_components() {
	echo "${CONTROL_PLANE[@]}"
	node_components
}

require_root() {
	[[ $EUID -eq 0 ]] || die "must run as root: the kubelets mount under their root dirs"
}

ensure_binaries() {
	local mode=${GPUDRA_BUILD:-auto} b missing_k8s=0 missing_gpudra=0
	[[ $mode =~ ^(auto|always|never)$ ]] || die "GPUDRA_BUILD must be auto, always or never, not '$mode'"
	for b in "${K8S_BINARIES[@]}"; do [[ -x $BIN_DIR/$b ]] || missing_k8s=1; done
	for b in "${GPUDRA_BINARIES[@]}"; do [[ -x $BIN_DIR/$b ]] || missing_gpudra=1; done
	if [[ $mode == never ]]; then
		((missing_k8s + missing_gpudra == 0)) || die "binaries missing in $BIN_DIR and GPUDRA_BUILD=never"
		return 0
	fi
	if ((missing_gpudra)) || [[ $mode == always ]]; then
		log "building gpudra: make -C $REPO_ROOT build"
		make -C "$REPO_ROOT" --no-print-directory build BIN="$BIN_DIR" ||
			die "make build failed"
	fi
	if ((missing_k8s)); then
		log "building Kubernetes binaries (slow when cold): hack/build-k8s.sh"
		BIN=$BIN_DIR "$REPO_ROOT/hack/build-k8s.sh" || die "hack/build-k8s.sh failed"
	fi
	for b in "${K8S_BINARIES[@]}" "${GPUDRA_BINARIES[@]}"; do
		[[ -x $BIN_DIR/$b ]] || die "$BIN_DIR/$b is missing after the build"
	done
	if [[ ! -f $SIM_NVML_LIB ]]; then
		make -C "$REPO_ROOT" --no-print-directory sim-nvml-lib || die "make sim-nvml-lib failed"
	fi
	if [[ ! -x $HELM ]]; then
		make -C "$REPO_ROOT" --no-print-directory "$HELM" || die "building helm failed"
	fi
}

# running_state prints "all", "none" or "some" for the recorded components.
running_state() {
	local c up=0 total=0
	for c in $(all_components); do
		total=$((total + 1))
		is_running "$c" && up=$((up + 1))
	done
	if ((up == 0)); then echo none; elif ((up == total)); then echo all; else echo some; fi
}

print_usage_hint() {
	cat <<-EOF
		  export KUBECONFIG=$ADMIN_KUBECONFIG
		  $BIN_DIR/kubectl get nodes,resourceslices
		  # or: $BIN_DIR/kubectl --kubeconfig \$(make -s kubeconfig) get nodes
		  # logs: $LOG_DIR/   stop: make cluster-down
	EOF
}

cmd_up() {
	require_root
	load_settings
	if [[ -r $SETTINGS_FILE ]]; then
		case $(running_state) in
		all)
			if apiserver_ready; then
				log "cluster already running in $CLUSTER_DIR"
				print_usage_hint
				return 0
			fi
			die "cluster processes run but the apiserver is not ready; run '$0 down' first"
			;;
		some) die "cluster in $CLUSTER_DIR is partially running (see '$0 status'); run '$0 down' first" ;;
		none) ;;
		esac
	fi
	if [[ -e $CLUSTER_DIR ]]; then
		log "removing the leftovers of a stopped cluster in $CLUSTER_DIR"
		teardown
		load_settings # from the environment now that cluster.env is gone
	fi
	detect_host_ip
	check_ports
	check_socket_paths
	check_host
	ensure_binaries
	START_MS=$(now_ms)
	mkdir -p "$CLUSTER_DIR" "$LOG_DIR" "$PID_DIR"
	save_settings
	save_host_state
	trap on_up_exit EXIT
	log "starting a cluster in $CLUSTER_DIR (host IP $HOST_IP, nodes: $NODES)"
	prepare_nodes
	make_pki
	up_control_plane
	apply_plugin_rbac
	up_nodes
	wait_control_plane
	wait_for "$WAIT_TIMEOUT" "the default ServiceAccount in namespace default" \
		"kube-apiserver kube-controller-manager" default_sa_exists
	log "ServiceAccount default/default exists"
	wait_nodes
	trap - EXIT
	log "cluster ready in $(elapsed)s"
	print_usage_hint
}

# on_up_exit tears a half-started cluster down, keeping its logs.
on_up_exit() {
	local rc=$?
	((rc == 0)) && return 0
	rm -rf "$CLUSTER_DIR-logs"
	cp -r "$LOG_DIR" "$CLUSTER_DIR-logs" 2>/dev/null && warn "logs kept in $CLUSTER_DIR-logs/"
	if [[ ${GPUDRA_KEEP_ON_FAILURE:-0} == 1 ]]; then
		warn "GPUDRA_KEEP_ON_FAILURE=1: leaving the processes running; '$0 down' cleans up"
	else
		warn "cluster up failed, tearing down"
		teardown || true
	fi
	exit "$rc"
}

# teardown stops every process (nodes first, etcd last), kills whatever of
# the cluster is left, unmounts and removes the cluster dir.
teardown() {
	local c pid leftover
	# Reverse start order: the controller, per node the plugin, the kubelet,
	# then the runtime.
	for c in "$CONTROLLER_COMPONENT" $(node_components | tr ' ' '\n' | tac) kube-controller-manager kube-scheduler kube-apiserver etcd; do
		stop_component "$c"
	done
	for pid in $(cluster_pids); do
		warn "killing leftover process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)"
		stop_pid "$pid" KILL
	done
	unmount_all "$CLUSTER_DIR"
	restore_host_state
	if [[ ${GPUDRA_KEEP_LOGS:-0} == 1 && -d $LOG_DIR ]]; then
		rm -rf "$CLUSTER_DIR-logs"
		cp -r "$LOG_DIR" "$CLUSTER_DIR-logs"
		log "logs kept in $CLUSTER_DIR-logs/"
	fi
	rm -rf "$CLUSTER_DIR"
	leftover=$(cluster_pids)
	[[ -z $leftover ]] || die "processes of the cluster still alive: $leftover"
	[[ -z $(mounts_under "$CLUSTER_DIR") ]] || die "mounts left under $CLUSTER_DIR"
}

cmd_down() {
	require_root
	load_settings
	if [[ ! -e $CLUSTER_DIR ]] && [[ -z $(cluster_pids) ]]; then
		log "no cluster in $CLUSTER_DIR"
		return 0
	fi
	teardown
	log "cluster in $CLUSTER_DIR stopped and removed"
}

cmd_status() {
	load_settings
	local c pid all_up=0
	[[ -r $SETTINGS_FILE ]] || { echo "no cluster in $CLUSTER_DIR"; return 1; }
	for c in $(all_components); do
		if pid=$(component_pid "$c"); then
			printf '%-34s running (pid %s)\n' "$c" "$pid"
		else
			printf '%-34s stopped\n' "$c"
			all_up=1
		fi
	done
	if pid=$(component_pid "$CONTROLLER_COMPONENT"); then
		printf '%-34s running (pid %s), optional\n' "$CONTROLLER_COMPONENT" "$pid"
	else
		printf '%-34s stopped, optional (start-controller)\n' "$CONTROLLER_COMPONENT"
	fi
	if apiserver_ready; then echo "apiserver: ready on :$APISERVER_PORT"; else echo "apiserver: not ready"; fi
	return "$all_up"
}

cmd_kubeconfig() {
	load_settings
	[[ -r $ADMIN_KUBECONFIG ]] || warn "no cluster in $CLUSTER_DIR yet: run 'make cluster-up'"
	echo "$ADMIN_KUBECONFIG"
}

# cmd_plugin ACTION NODE stops, starts or kill -9 + restarts one plugin.
cmd_plugin() {
	local action=$1 node=${2:-}
	[[ -n $node ]] || die "usage: $0 $action-plugin NODE"
	require_root
	load_settings
	node_profile "$node" >/dev/null
	is_running "kubelet-$node" || die "kubelet-$node is not running; start the cluster first"
	if [[ $action == start ]] && is_running "plugin-$node"; then
		log "plugin-$node already running (pid $(component_pid "plugin-$node"))"
		return 0
	fi
	local registrations
	registrations=$(kubelet_registrations "$node")
	case $action in
	stop) stop_component "plugin-$node" TERM ;;
	restart) stop_component "plugin-$node" KILL ;;
	esac
	if [[ $action != stop ]]; then
		START_MS=$(now_ms)
		start_plugin "$node"
		wait_plugin "$node"
		wait_registered "$node" "$registrations"
		log "plugin-$node serving and registered with kubelet-$node (pid $(component_pid "plugin-$node"))"
	fi
}

# cmd_apiserver ACTION stops or starts kube-apiserver alone.
cmd_apiserver() {
	require_root
	load_settings
	case $1 in
	stop) stop_component kube-apiserver TERM ;;
	start)
		START_MS=$(now_ms)
		start_apiserver
		wait_for "$WAIT_TIMEOUT" "kube-apiserver /readyz" kube-apiserver apiserver_ready
		log "kube-apiserver ready in $(elapsed)s"
		;;
	esac
}

main() {
	local cmd=${1:-}
	shift || true
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	kubeconfig) cmd_kubeconfig ;;
	stop-plugin | start-plugin | restart-plugin) cmd_plugin "${cmd%-plugin}" "$@" ;;
	start-controller) cmd_start_controller ;;
	stop-controller) cmd_stop_controller ;;
	stop-apiserver | start-apiserver) cmd_apiserver "${cmd%-apiserver}" ;;
	add-node) cmd_add_node "$@" ;;
	remove-node) cmd_remove_node "$@" ;;
	inject-fault) cmd_inject_fault "$@" ;;
	clear-faults) cmd_clear_faults "$@" ;;
	-h | --help | help) sed -n '/^# Starts/,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
	*) die "usage: $0 up|down|status|kubeconfig|stop-plugin NODE|start-plugin NODE|restart-plugin NODE|start-controller|stop-controller|add-node NODE=PROFILE [PLUGIN-FLAG...]|remove-node NODE|inject-fault NODE GPU FAULT|clear-faults NODE|stop-apiserver|start-apiserver (see --help)" ;;
	esac
}

main "$@"
