#!/usr/bin/env bash
# delete-cluster.sh deletes the kind cluster create-cluster.sh made.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

need kind
log "deleting kind cluster $KIND_CLUSTER_NAME"
kind delete cluster --name "$KIND_CLUSTER_NAME"
