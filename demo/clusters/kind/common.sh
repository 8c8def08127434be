# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are used by the scripts that source this file
# Settings shared by the kind scripts; every one can be overridden from the
# environment. Sourced, not run.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# Name of the kind cluster.
KIND_CLUSTER_NAME=${KIND_CLUSTER_NAME:-gpudra}
# Node image. Its tag must name the Kubernetes version (vMAJOR.MINOR.PATCH):
# create-cluster.sh picks the feature gates from it.
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.37.1}
# Worker nodes; with --simulated each one publishes a simulated GPU node.
KIND_WORKERS=${KIND_WORKERS:-2}
# The driver image built by `make image` and loaded into the nodes.
IMAGE=${IMAGE:-ghcr.io/gpudra/gpudra}
TAG=${TAG:-dev}
# Where the chart goes.
GPUDRA_NAMESPACE=${GPUDRA_NAMESPACE:-gpudra-system}
GPUDRA_RELEASE=${GPUDRA_RELEASE:-gpudra}
CHART=$REPO_ROOT/deployments/helm/gpudra

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found in PATH${2:+ ($2)}"
}

# helm_bin prints the helm to use: the repository's (make helm builds it) or
# one from PATH.
helm_bin() {
	if [[ -x $REPO_ROOT/_output/tools/helm ]]; then
		echo "$REPO_ROOT/_output/tools/helm"
	else
		need helm "or build it with: make $REPO_ROOT/_output/tools/helm"
		command -v helm
	fi
}
