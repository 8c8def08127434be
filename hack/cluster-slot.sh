#!/usr/bin/env bash
# Prints exports that give a development cluster its own dir and ports, so
# that several clusters (one per git worktree) run side by side on one host:
#   eval "$(hack/cluster-slot.sh 2)" && make e2e
# Slot 0 is the default cluster. etcd and apiserver ports (below 30000) move
# by 100 per slot, the others (30000 and up) by 1000.
set -euo pipefail
slot=${1:?usage: $0 SLOT (1-9)}
[[ $slot =~ ^[0-9]$ ]] || { echo "slot must be 0-9" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
off=$((slot * 1000))
low=$((slot * 100))
cat <<OUT
export GPUDRA_CLUSTER_DIR=$root/_output/cluster
export GPUDRA_SHARED_HOST=$([[ $slot == 0 ]] && echo 0 || echo 1)
export GPUDRA_ETCD_PORT=$((23379 + low))
export GPUDRA_ETCD_PEER_PORT=$((23380 + low))
export GPUDRA_APISERVER_PORT=$((26443 + low))
export GPUDRA_SCHEDULER_PORT=$((30259 + off))
export GPUDRA_CONTROLLER_MANAGER_PORT=$((30257 + off))
export GPUDRA_KUBELET_PORT=$((30250 + off))
export GPUDRA_KUBELET_HEALTHZ_PORT=$((30280 + off))
export GPUDRA_CONTROLLER_WEBHOOK_PORT=$((30443 + off))
export GPUDRA_CONTROLLER_METRICS_PORT=$((30880 + off))
export GPUDRA_PLUGIN_METRICS_PORT=$((30900 + off))
export GPUDRA_SERVICE_CIDR=10.$((slot)).0.0/24
OUT
