# shellcheck shell=bash
# The control plane of the test cluster: etcd, kube-apiserver,
# kube-scheduler and kube-controller-manager, each a background process with
# a PID file and a log. Sourced by cluster.sh.

# shellcheck disable=SC2034 # used by cluster.sh
CONTROL_PLANE=(etcd kube-apiserver kube-scheduler kube-controller-manager)

start_etcd() {
	local peer="http://127.0.0.1:$ETCD_PEER_PORT" client="http://127.0.0.1:$ETCD_CLIENT_PORT"
	mkdir -p "$CLUSTER_DIR/etcd"
	chmod 700 "$CLUSTER_DIR/etcd"
	# A single member on loopback over plain HTTP; no fsync since the data
	# is thrown away with the cluster.
	start_component etcd "$BIN_DIR/etcd" \
		--name gpudra \
		--data-dir "$CLUSTER_DIR/etcd/data" \
		--listen-client-urls "$client" \
		--advertise-client-urls "$client" \
		--listen-peer-urls "$peer" \
		--initial-advertise-peer-urls "$peer" \
		--initial-cluster "gpudra=$peer" \
		--initial-cluster-state new \
		--unsafe-no-fsync \
		--log-level warn
}

etcd_healthy() {
	curl -sf --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"'
}

start_apiserver() {
	# shellcheck disable=SC2054 # the commas separate plugin and mode names
	local args=(
		--bind-address "$APISERVER_BIND_ADDRESS"
		--advertise-address "$HOST_IP"
		--secure-port "$APISERVER_PORT"
		--etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT"
		--tls-cert-file "$PKI_DIR/apiserver.crt"
		--tls-private-key-file "$PKI_DIR/apiserver.key"
		--client-ca-file "$PKI_DIR/ca.crt"
		--service-account-issuer https://kubernetes.default.svc.cluster.local
		--service-account-key-file "$PKI_DIR/sa.pub"
		--service-account-signing-key-file "$PKI_DIR/sa.key"
		--service-cluster-ip-range "$SERVICE_CIDR"
		--authorization-mode Node,RBAC
		--enable-admission-plugins NodeRestriction
		--runtime-config resource.k8s.io/v1=true
		# Like every real cluster (and kind): the plugin DaemonSet of the Helm
		# chart is privileged on real GPU nodes, and its dry run must pass.
		--allow-privileged=true
		# logs/exec/port-forward: the apiserver dials the kubelet's InternalIP
		# (the node names are not resolvable) with this client certificate.
		--kubelet-client-certificate "$PKI_DIR/apiserver-kubelet-client.crt"
		--kubelet-client-key "$PKI_DIR/apiserver-kubelet-client.key"
		--kubelet-preferred-address-types InternalIP,Hostname
		--profiling=false
		--v "$COMPONENT_V"
	)
	start_component kube-apiserver "$BIN_DIR/kube-apiserver" "${args[@]}"
}

apiserver_ready() { https_ok "https://127.0.0.1:$APISERVER_PORT/readyz"; }

# start_kube_component NAME PORT EXTRA-ARGS... starts the scheduler or the
# controller-manager with its kubeconfig, delegated authn/authz and no leader
# election (there is only one of each).
start_kube_component() {
	local name=$1 port=$2
	shift 2
	local kubeconfig="$KUBECONFIG_DIR/$name.kubeconfig"
	start_component "$name" "$BIN_DIR/$name" \
		--kubeconfig "$kubeconfig" \
		--authentication-kubeconfig "$kubeconfig" \
		--authorization-kubeconfig "$kubeconfig" \
		--bind-address 127.0.0.1 \
		--secure-port "$port" \
		--leader-elect=false \
		--profiling=false \
		--v "$COMPONENT_V" \
		"$@"
}

start_scheduler() {
	local extra=()
	# Stock client limits (50 QPS, burst 100) unless GPUDRA_SCHEDULER_QPS says
	# otherwise: scheduling benchmarks use it to take the client-side
	# throttle out of the measurement.
	if [[ -n ${GPUDRA_SCHEDULER_QPS:-} ]]; then
		extra=(--kube-api-qps "$GPUDRA_SCHEDULER_QPS" --kube-api-burst "$((GPUDRA_SCHEDULER_QPS * 2))")
	fi
	start_kube_component kube-scheduler "$SCHEDULER_PORT" "${extra[@]}"
}

start_controller_manager() {
	start_kube_component kube-controller-manager "$CONTROLLER_MANAGER_PORT" \
		--service-account-private-key-file "$PKI_DIR/sa.key" \
		--root-ca-file "$PKI_DIR/ca.crt" \
		--use-service-account-credentials \
		--cluster-signing-cert-file "$PKI_DIR/ca.crt" \
		--cluster-signing-key-file "$PKI_DIR/ca.key" \
		--service-cluster-ip-range "$SERVICE_CIDR"
}

# healthz_ok PORT: the scheduler and the controller-manager serve /healthz
# over TLS with a self-signed certificate, to anyone.
healthz_ok() { curl -skf --max-time 2 "https://127.0.0.1:$1/healthz" | grep -qx ok; }

# up_control_plane starts etcd and the apiserver and waits for them; the
# scheduler and the controller-manager are started without waiting, see
# wait_control_plane.
up_control_plane() {
	start_etcd
	wait_for "$WAIT_TIMEOUT" "etcd health on :$ETCD_CLIENT_PORT" etcd etcd_healthy
	log "etcd healthy (:$ETCD_CLIENT_PORT)"
	start_apiserver
	wait_for "$WAIT_TIMEOUT" "kube-apiserver /readyz on :$APISERVER_PORT" "etcd kube-apiserver" apiserver_ready
	log "kube-apiserver ready (:$APISERVER_PORT)"
	start_scheduler
	start_controller_manager
}

wait_control_plane() {
	wait_for "$WAIT_TIMEOUT" "kube-scheduler /healthz on :$SCHEDULER_PORT" \
		"kube-apiserver kube-scheduler" healthz_ok "$SCHEDULER_PORT"
	wait_for "$WAIT_TIMEOUT" "kube-controller-manager /healthz on :$CONTROLLER_MANAGER_PORT" \
		"kube-apiserver kube-controller-manager" healthz_ok "$CONTROLLER_MANAGER_PORT"
	log "kube-scheduler and kube-controller-manager healthy"
}
