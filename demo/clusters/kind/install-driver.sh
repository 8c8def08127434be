#!/usr/bin/env bash
# install-driver.sh installs (or upgrades) gpudra with Helm into the kind
# cluster create-cluster.sh made. Settings: common.sh.
#
#   demo/clusters/kind/install-driver.sh --simulated        # no GPUs: simulated DGX H100 nodes
#   SIM_PROFILE=mixed demo/clusters/kind/install-driver.sh --simulated
#
# Options:
#   --simulated   make a simulated driver root of profile $SIM_PROFILE
#                 (default dgx-h100) on every worker (make fake-driver-root,
#                 copied in with docker cp) and use values-simulated.yaml
#   --no-build    do not build the image; load IMAGE:TAG as it is
#   --no-load     do not load the image into the nodes (it is in a registry)
#   -- ARGS       pass ARGS to helm upgrade --install
#
# Without --simulated the chart runs with its defaults, for real GPUs: the
# kind nodes must then see the host's GPUs and driver, which
# create-cluster.sh does not set up (see README.md).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

simulated=false build=true load=true
helm_args=()
while (($#)); do
	case $1 in
	--simulated) simulated=true ;;
	--no-build) build=false ;;
	--no-load) load=false ;;
	--)
		shift
		helm_args=("$@")
		break
		;;
	-h | --help)
		sed -n '2,/^set /s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" | grep -v '^set '
		exit 0
		;;
	*) die "unknown argument $1 (try --help)" ;;
	esac
	shift
done

need kind
need kubectl
helm=$(helm_bin)
kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME" ||
	die "no kind cluster $KIND_CLUSTER_NAME; run demo/clusters/kind/create-cluster.sh first"
kubectl config use-context "kind-$KIND_CLUSTER_NAME" >/dev/null

if $build; then
	need docker
	log "building $IMAGE:$TAG"
	make -C "$REPO_ROOT" image IMAGE="$IMAGE" TAG="$TAG"
fi
if $load; then
	log "loading $IMAGE:$TAG into the nodes of $KIND_CLUSTER_NAME"
	kind load docker-image "$IMAGE:$TAG" --name "$KIND_CLUSTER_NAME"
fi

values=()
if $simulated; then
	# The chart's simulated values mount this root on every node.
	sim_root=/var/lib/gpudra-sim/driver-root
	need docker
	for node in $(kind get nodes --name "$KIND_CLUSTER_NAME"); do
		[[ $node == *control-plane* ]] && continue
		log "simulated driver root ($SIM_PROFILE) on $node"
		tmp=$(mktemp -d)
		make -C "$REPO_ROOT" --no-print-directory fake-driver-root DIR="$tmp/root" PROFILE="${SIM_PROFILE:-dgx-h100}" NODE="$node"
		docker exec "$node" mkdir -p "$(dirname "$sim_root")"
		docker exec "$node" rm -rf "$sim_root"
		# tar keeps the device nodes (docker cp does not copy them).
		tar -C "$tmp/root" -cf - . | docker exec -i "$node" sh -c "mkdir -p $sim_root && tar -C $sim_root -xf -"
		rm -rf "$tmp"
	done
	values=(--values "$CHART/values-simulated.yaml")
fi
log "helm upgrade --install $GPUDRA_RELEASE into namespace $GPUDRA_NAMESPACE"
"$helm" upgrade --install "$GPUDRA_RELEASE" "$CHART" \
	--namespace "$GPUDRA_NAMESPACE" --create-namespace \
	"${values[@]}" \
	--set image.repository="$IMAGE" --set image.tag="$TAG" \
	--wait --timeout 5m \
	"${helm_args[@]}"

log "driver pods:"
kubectl -n "$GPUDRA_NAMESPACE" get pods -o wide
log "waiting for the nodes' ResourceSlices"
for _ in $(seq 60); do
	n=$(kubectl get resourceslices --field-selector spec.driver=gpu.gpudra.io --no-headers 2>/dev/null | wc -l)
	((n > 0)) && break
	sleep 2
done
kubectl get resourceslices --field-selector spec.driver=gpu.gpudra.io
kubectl get deviceclasses
log "next: the example pod in demo/clusters/kind/README.md"
