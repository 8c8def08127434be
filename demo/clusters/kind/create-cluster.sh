#!/usr/bin/env bash
# create-cluster.sh creates a kind cluster ready for gpudra: CDI on in
# containerd, and the DRA feature gates of the node image's Kubernetes
# version turned on (see README.md for the table). Settings: common.sh.
#
#   demo/clusters/kind/create-cluster.sh              # kindest/node:v1.37.1, 2 workers
#   KIND_NODE_IMAGE=kindest/node:v1.34.0 demo/clusters/kind/create-cluster.sh
#   demo/clusters/kind/create-cluster.sh --print-config   # only print the kind config
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

print_only=false
case ${1:-} in
"") ;;
--print-config) print_only=true ;;
-h | --help)
	sed -n '2,/^set /s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" | grep -v '^set '
	exit 0
	;;
*) die "unknown argument $1 (try --help)" ;;
esac

[[ $KIND_NODE_IMAGE =~ :v1\.([0-9]+)\. ]] ||
	die "cannot read the Kubernetes version from KIND_NODE_IMAGE=$KIND_NODE_IMAGE (expected a tag like v1.37.1)"
minor=${BASH_REMATCH[1]}
((minor >= 34)) || die "Kubernetes 1.$minor: gpudra needs 1.34 or later (resource.k8s.io/v1)"
[[ $KIND_WORKERS =~ ^[1-9][0-9]*$ ]] || die "KIND_WORKERS=$KIND_WORKERS: need a positive number"

# Feature gates per version. DynamicResourceAllocation itself is GA (on) from
# 1.34. Only gates that are off by default in that version are listed: naming
# a gate a version does not know makes its components refuse to start.
#   DRAExtendedResource      pods asking for nvidia.com/gpu get a DRA GPU (used by the demo)
#   DRAPartitionableDevices  MIG partitions sharing a GPU's memory slices (dynamic MIG)
#   DRAConsumableCapacity    a device shared by several claims (GPU sharing)
#   DRADeviceTaints          health: tainted GPUs are not allocated
#   DRADeviceTaintRules      DeviceTaintRule objects (admin taints)
gates=()
runtime_config=(resource.k8s.io/v1beta1 resource.k8s.io/v1beta2)
case $minor in
34)
	gates=(DRAExtendedResource DRAPartitionableDevices DRAConsumableCapacity DRADeviceTaints)
	# DeviceTaintRule is served as v1alpha3 in 1.34 and 1.35.
	runtime_config+=(resource.k8s.io/v1alpha3)
	;;
35)
	gates=(DRAExtendedResource DRAPartitionableDevices DRAConsumableCapacity DRADeviceTaints DRADeviceTaintRules)
	runtime_config+=(resource.k8s.io/v1alpha3)
	;;
36)
	# Extended resources, partitionable devices, consumable capacity and
	# device taints are beta and on; DeviceTaintRule is beta but off.
	gates=(DRADeviceTaintRules)
	;;
*)
	# 1.37 and later: everything gpudra uses is on by default.
	gates=()
	;;
esac

config() {
	echo "# kind cluster for gpudra (Kubernetes 1.$minor), written by ${BASH_SOURCE[0]##*/}"
	echo "kind: Cluster"
	echo "apiVersion: kind.x-k8s.io/v1alpha4"
	echo "name: $KIND_CLUSTER_NAME"
	if ((${#gates[@]})); then
		echo "featureGates:"
		printf '  %s: true\n' "${gates[@]}"
	fi
	# v1beta1/v1beta2 of resource.k8s.io for clients built against 1.32/1.33
	# (gpudra itself uses v1 only); v1alpha3 for DeviceTaintRule on 1.34/1.35.
	echo "runtimeConfig:"
	printf '  "%s": "true"\n' "${runtime_config[@]}"
	# containerd 2.x has CDI on by default, 1.7 does not. The plugin writes
	# its per-claim specs to /var/run/cdi.
	cat <<-'EOF'
		containerdConfigPatches:
		- |-
		  [plugins."io.containerd.grpc.v1.cri"]
		    enable_cdi = true
		    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
		nodes:
		- role: control-plane
	EOF
	local i
	for ((i = 0; i < KIND_WORKERS; i++)); do
		echo "- role: worker"
	done
}

if $print_only; then
	config
	exit 0
fi

need kind
need docker
cfg=$(mktemp)
trap 'rm -f "$cfg"' EXIT
config >"$cfg"
log "creating kind cluster $KIND_CLUSTER_NAME ($KIND_NODE_IMAGE, $KIND_WORKERS workers)" \
	"${gates[*]:+feature gates: ${gates[*]}}"
kind create cluster --image "$KIND_NODE_IMAGE" --config "$cfg" --wait 3m
log "cluster ready; next: demo/clusters/kind/install-driver.sh --simulated"
