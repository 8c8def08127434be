#!/usr/bin/env bash
# `make demo`: start the local cluster (simulated GPUs, real control plane and
# kubelets), install the DeviceClasses, then apply each demo/specs/*.yaml in
# turn and show which pod/container got which GPU on which node — read from
# `kubectl logs`, i.e. from what the container runtime injected.
#
#   KEEP_CLUSTER=1 make demo    # leave the cluster running afterwards
#   DEMO_SPECS="demo/specs/03-*.yaml" make demo   # run a subset
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cluster=test/cluster/cluster.sh
kubectl="$root/_output/bin/kubectl"
ns=demo
timeout="${DEMO_TIMEOUT:-90}"

log() { printf '\n\033[1m%s\033[0m\n' "$*"; }

teardown() {
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "Cluster left running (KEEP_CLUSTER=1). kubectl: $kubectl --kubeconfig $("$cluster" kubeconfig); stop it with: make cluster-down"
  else
    log "Tearing the cluster down (set KEEP_CLUSTER=1 to keep it)"
    "$cluster" down
  fi
}

"$cluster" up
trap teardown EXIT
export KUBECONFIG
KUBECONFIG="$("$cluster" kubeconfig)"

log "Installing DeviceClasses"
"$kubectl" apply -f deployments/static/
"$kubectl" create namespace "$ns" --dry-run=client -o yaml | "$kubectl" apply -f -
for _ in $(seq 60); do "$kubectl" -n "$ns" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done

log "ResourceSlices published by the kubelet plugins"
"$kubectl" get resourceslices -o custom-columns='SLICE:.metadata.name,NODE:.spec.nodeName,DEVICES:.spec.devices[*].name'

# settle waits until every pod of the namespace runs, or is Pending because
# the scheduler reported it unschedulable, or the timeout passes.
settle() {
  local deadline=$((SECONDS + timeout)) states
  while [ $SECONDS -lt $deadline ]; do
    states=$("$kubectl" -n "$ns" get pods -o jsonpath='{range .items[*]}{.status.phase}/{.status.conditions[?(@.type=="PodScheduled")].reason}{"\n"}{end}' 2>/dev/null)
    if [ -n "$states" ] && ! grep -qvE '^Running/|^Pending/Unschedulable$' <<<"$states"; then
      return 0
    fi
    sleep 0.5
  done
  echo "!! pods did not settle within ${timeout}s:"; "$kubectl" -n "$ns" get pods -o wide
  return 1
}

# report prints, per pod and container, the node and the GPUs it sees.
report() {
  local pod node phase ctr
  printf '%-42s %-10s %-8s %s\n' POD/CONTAINER NODE PHASE "GPUS (as the container sees them)"
  for pod in $("$kubectl" -n "$ns" get pods -o jsonpath='{.items[*].metadata.name}'); do
    node=$("$kubectl" -n "$ns" get pod "$pod" -o jsonpath='{.spec.nodeName}')
    phase=$("$kubectl" -n "$ns" get pod "$pod" -o jsonpath='{.status.phase}')
    if [ "$phase" != Running ]; then
      printf '%-42s %-10s %-8s %s\n' "$pod" "${node:--}" "$phase" \
        "$("$kubectl" -n "$ns" get events --field-selector "involvedObject.name=$pod" -o jsonpath='{.items[-1:].message}' | cut -c1-200)"
      continue
    fi
    for ctr in $("$kubectl" -n "$ns" get pod "$pod" -o jsonpath='{.spec.containers[*].name}'); do
      printf '%-42s %-10s %-8s %s\n' "$pod/$ctr" "$node" "$phase" \
        "$("$kubectl" -n "$ns" logs "$pod" -c "$ctr" | grep '^GPU [0-9]*:' | paste -sd ';' -)"
    done
  done
}

specs=(${DEMO_SPECS:-demo/specs/*.yaml})
failed=0
for spec in "${specs[@]}"; do
  log "== $(basename "$spec")"
  grep '^# ' "$spec" | grep -Ev '^# (then|node):' | sed 's/^# /   /'
  # "# node: NAME=PROFILE FLAGS...": the scenario needs an extra node.
  extra_node=$(sed -n 's/^# node: //p' "$spec")
  if [ -n "$extra_node" ]; then
    echo "   \$ test/cluster/cluster.sh add-node $extra_node"
    # shellcheck disable=SC2086 # NAME=PROFILE and flags are separate words
    "$cluster" add-node $extra_node >/dev/null
  fi
  "$kubectl" apply -f "$spec" >/dev/null
  settle || failed=1
  while IFS= read -r step; do
    echo "   \$ $step"
    eval "${step/kubectl/\"$kubectl\"}" >/dev/null
    sleep 2
    settle || failed=1
  done < <(sed -n 's/^# then: //p' "$spec")
  report
  "$kubectl" delete -f "$spec" --wait=true --timeout=60s >/dev/null
  "$kubectl" -n "$ns" wait --for=delete pod --all --timeout=60s >/dev/null 2>&1 || true
  "$kubectl" -n "$ns" delete events --all >/dev/null 2>&1 || true
  if [ -n "$extra_node" ]; then "$cluster" remove-node "${extra_node%%=*}" >/dev/null; fi
done
[ "$failed" = 0 ] || { echo "!! some scenarios did not settle"; exit 1; }
log "Demo complete: every scenario ran through the real scheduler, kubelet and gpudra plugin."
