# shellcheck shell=bash
# Throw-away PKI of the test cluster, made with openssl: one CA, the client
# certificates of every component, the apiserver's serving certificate, the
# service-account key pair and the kubeconfigs. Sourced by cluster.sh.
#
# All keys are ECDSA P-256: quick to generate and accepted by every component
# (the service-account tokens are signed with ES256).

# new_key FILE writes a fresh private key.
new_key() {
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
	chmod 600 "$1"
}

# make_ca writes ca.key and a self-signed ca.crt.
make_ca() {
	new_key "$PKI_DIR/ca.key"
	openssl req -x509 -new -key "$PKI_DIR/ca.key" -out "$PKI_DIR/ca.crt" \
		-days 3650 -subj "/CN=gpudra-test-ca" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}

# sign_cert NAME SUBJECT USAGE [SAN] writes NAME.key and NAME.crt signed by
# the CA. USAGE is clientAuth or serverAuth; SAN an openssl subjectAltName.
sign_cert() {
	local name=$1 subject=$2 usage=$3 san=${4:-}
	local key="$PKI_DIR/$name.key" crt="$PKI_DIR/$name.crt" ext="$PKI_DIR/$name.ext"
	new_key "$key"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		if [[ -n $san ]]; then
			echo "subjectAltName=$san"
		fi
	} >"$ext"
	openssl req -new -key "$key" -subj "$subject" 2>/dev/null |
		openssl x509 -req -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" \
			-set_serial "0x$(openssl rand -hex 16)" -days 365 \
			-extfile "$ext" -out "$crt" 2>/dev/null
	rm -f "$ext"
	[[ -s $crt ]] || die "could not sign the certificate $name ($subject)"
}

# b64 prints a file base64-encoded on one line.
b64() { base64 -w0 <"$1"; }

# write_kubeconfig FILE USER CERT-NAME writes a kubeconfig for the apiserver
# with the certificate CERT-NAME embedded.
write_kubeconfig() {
	local file=$1 user=$2 cert=$3
	cat >"$file" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: gpudra
		  cluster:
		    server: https://127.0.0.1:$APISERVER_PORT
		    certificate-authority-data: $(b64 "$PKI_DIR/ca.crt")
		users:
		- name: $user
		  user:
		    client-certificate-data: $(b64 "$PKI_DIR/$cert.crt")
		    client-key-data: $(b64 "$PKI_DIR/$cert.key")
		contexts:
		- name: gpudra
		  context:
		    cluster: gpudra
		    user: $user
		current-context: gpudra
	EOF
	chmod 600 "$file"
}

# apiserver_sans prints the subjectAltName of the apiserver's certificate.
apiserver_sans() {
	local sans="IP:127.0.0.1,IP:$SERVICE_IP,IP:$HOST_IP,DNS:localhost,DNS:kubernetes"
	sans+=",DNS:kubernetes.default,DNS:kubernetes.default.svc"
	sans+=",DNS:kubernetes.default.svc.cluster.local"
	echo "$sans"
}

# make_pki creates everything once; an existing PKI dir is reused.
make_pki() {
	if [[ -s $KUBECONFIG_DIR/admin.kubeconfig ]]; then
		log "PKI: reusing $PKI_DIR"
		return 0
	fi
	mkdir -p "$PKI_DIR" "$KUBECONFIG_DIR"
	chmod 700 "$PKI_DIR"
	make_ca
	sign_cert apiserver "/CN=kube-apiserver" serverAuth "$(apiserver_sans)"
	sign_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	sign_cert admin "/O=system:masters/CN=gpudra-admin" clientAuth
	sign_cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
	sign_cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
	local node
	for node in "${NODE_NAMES[@]}"; do
		sign_cert "node-$node" "/O=system:nodes/CN=system:node:$node" clientAuth
	done
	new_key "$PKI_DIR/sa.key"
	openssl pkey -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null

	write_kubeconfig "$KUBECONFIG_DIR/admin.kubeconfig" gpudra-admin admin
	write_kubeconfig "$KUBECONFIG_DIR/kube-scheduler.kubeconfig" system:kube-scheduler kube-scheduler
	write_kubeconfig "$KUBECONFIG_DIR/kube-controller-manager.kubeconfig" \
		system:kube-controller-manager kube-controller-manager
	for node in "${NODE_NAMES[@]}"; do
		write_kubeconfig "$(node_kubeconfig "$node")" "system:node:$node" "node-$node"
	done
	log "PKI: CA, $((5 + ${#NODE_NAMES[@]})) certificates and kubeconfigs in $CLUSTER_DIR"
}

node_kubeconfig() { echo "$KUBECONFIG_DIR/node-$1.kubeconfig"; }
