#!/usr/bin/env bash
# `make demo`: start the local cluster (test/localcluster: real control plane,
# a containerd and a kubelet per simulated GPU node, the driver installed
# with its Helm chart), then apply each demo/specs/*.yaml in turn and show
# which pod/container got which GPU on which node — what the container itself
# printed (gpudra-gpus in the workload image reads its device nodes and the
# variables CDI gave it), with the product name from the ResourceSlice.
#
#   KEEP_CLUSTER=1 make demo    # leave the cluster running afterwards
#   DEMO_SPECS="demo/specs/03-*.yaml" make demo   # run a subset
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# shellcheck source=demo/lib.sh
source "$root/demo/lib.sh"
cluster="$root/_output/bin/gpudra-cluster"
kubectl="$root/_output/bin/kubectl"
ns=demo
timeout="${DEMO_TIMEOUT:-120}"

log() { printf '\n\033[1m%s\033[0m\n' "$*"; }

teardown() {
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "Cluster left running (KEEP_CLUSTER=1). kubectl: $kubectl --kubeconfig $("$cluster" kubeconfig); stop it with: make cluster-down"
  else
    log "Tearing the cluster down (set KEEP_CLUSTER=1 to keep it)"
    "$cluster" down
  fi
}

# summary prints one line per node: its GPUs by model, and its MIG devices
# by profile (on a dynamic-MIG node every placement a claim could get).
summary() {
  # A Go template, not shell: its $node must stay literal.
  # shellcheck disable=SC2016
  "$kubectl" get resourceslices -o go-template='{{range .items}}{{$node := .spec.nodeName}}{{range .spec.devices}}{{$node}}{{"\t"}}{{.attributes.type.string}}{{"\t"}}{{.attributes.productName.string}}{{"\t"}}{{with .attributes.profile}}{{.string}}{{end}}{{"\n"}}{{end}}{{end}}' |
    sort | awk -F'\t' '
      !($1 in seen) { seen[$1] = 1; nodes[++n] = $1 }
      $2 == "gpu" && !(($1, $3) in gpus) { gorder[$1] = gorder[$1] SUBSEP $3 }
      $2 == "gpu" { gpus[$1, $3]++ }
      $2 == "mig" && !(($1, $4) in migs) { morder[$1] = morder[$1] SUBSEP $4 }
      $2 == "mig" { migs[$1, $4]++; nmig[$1]++ }
      END {
        printf "%-12s %-48s %s\n", "NODE", "GPUS", "MIG DEVICES (dynamic MIG: every placement a claim can get)"
        for (i = 1; i <= n; i++) {
          node = nodes[i]; g = ""; m = ""
          k = split(gorder[node], names, SUBSEP)
          for (j = 2; j <= k; j++) g = g (g ? ", " : "") gpus[node, names[j]] "x " names[j]
          k = split(morder[node], names, SUBSEP)
          for (j = 2; j <= k; j++) m = m (m ? ", " : "") migs[node, names[j]] "x " names[j]
          printf "%-12s %-48s %s\n", node, (g ? g : "-"), (m ? nmig[node] " (" m ")" : "-")
        }
      }'
}

"$cluster" up
trap teardown EXIT
export KUBECONFIG
KUBECONFIG="$("$cluster" kubeconfig)"

log "The driver, installed with helm; its DeviceClasses; the ResourceSlices its plugins published"
"$root/_output/tools/helm" list -n gpudra-system
"$kubectl" get nodes -o custom-columns='NODE:.metadata.name,RUNTIME:.status.nodeInfo.containerRuntimeVersion'
"$kubectl" -n gpudra-system get pods -o wide
"$kubectl" get deviceclasses
summary
"$kubectl" create namespace "$ns" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
for _ in $(seq 60); do "$kubectl" -n "$ns" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done

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

# products maps device UUIDs to "product [MIG profile]" from the ResourceSlices.
declare -A products
load_products() {
  local uuid rest
  products=()
  while IFS=$'\t' read -r uuid rest; do
    [ -n "$uuid" ] && products[$uuid]=${rest% }
  done < <("$kubectl" get resourceslices -o jsonpath='{range .items[*].spec.devices[*]}{.attributes.uuid.string}{"\t"}{.attributes.productName.string} {.attributes.profile.string}{"\n"}{end}')
}

# gpus prints the GPUs a container sees, as the container printed them
# (gpu_log and gpu_list, demo/lib.sh).
gpus() {
  gpu_log -n "$ns" "$1" -c "$2" | gpu_list || true
}

# report prints, per pod and container, the node and the GPUs it sees.
report() {
  local pod node phase ctr
  load_products
  printf '%-42s %-10s %-8s %s\n' POD/CONTAINER NODE PHASE "GPUS (as the container printed them)"
  for pod in $("$kubectl" -n "$ns" get pods -o jsonpath='{.items[*].metadata.name}'); do
    node=$("$kubectl" -n "$ns" get pod "$pod" -o jsonpath='{.spec.nodeName}')
    phase=$("$kubectl" -n "$ns" get pod "$pod" -o jsonpath='{.status.phase}')
    if [ "$phase" != Running ]; then
      printf '%-42s %-10s %-8s %s\n' "$pod" "${node:--}" "$phase" \
        "$("$kubectl" -n "$ns" get events --field-selector "involvedObject.name=$pod" -o jsonpath='{.items[-1:].message}' | cut -c1-200)"
      continue
    fi
    for ctr in $("$kubectl" -n "$ns" get pod "$pod" -o jsonpath='{.spec.containers[*].name}'); do
      printf '%-42s %-10s %-8s %s\n' "$pod/$ctr" "$node" "$phase" "$(gpus "$pod" "$ctr")"
    done
  done
}

# step runs one "# then|before|after:" line of a spec, with the cluster's
# kubectl and gpudra-cluster.
step() {
  local step=$1
  echo "   \$ $step"
  step=${step//kubectl/\"$kubectl\"}
  eval "${step/gpudra-cluster/\"$cluster\"}" >/dev/null
}

# steps runs the spec's "# $1:" lines in order; it stops at the first that fails.
steps() {
  local line
  while IFS= read -r line; do
    step "$line" || { echo "!! failed: $line"; return 1; }
  done < <(sed -n "s/^# $1: //p" "$spec")
}

# DEMO_SPECS is a glob (or several): word splitting and expansion wanted.
# shellcheck disable=SC2206
specs=(${DEMO_SPECS:-demo/specs/*.yaml})
failed=0
for spec in "${specs[@]}"; do
  log "== $(basename "$spec")"
  grep '^# ' "$spec" | grep -Ev '^# (then|node|before|after):' | sed 's/^# /   /'
  # "# node: NAME=PROFILE FLAGS...": the scenario needs a node whose plugin
  # has other flags than the DaemonSet's: gpudra-cluster add-node joins it
  # with a node group of the chart of its own; it is removed afterwards.
  node=$(sed -n 's/^# node: //p' "$spec")
  if [ -n "$node" ]; then
    echo "   \$ gpudra-cluster add-node $node"
    # NAME=PROFILE FLAGS...: word splitting wanted.
    # shellcheck disable=SC2086
    "$cluster" add-node $node >/dev/null
  fi
  # "# before:" steps prepare the cluster (e.g. partition GPUs, switch the
  # plugin's flags); "# after:" steps undo them once the spec is deleted.
  steps before || failed=1
  "$kubectl" apply -f "$spec" >/dev/null
  settle || failed=1
  while IFS= read -r step; do
    step "$step"
    sleep 2
    settle || failed=1
  done < <(sed -n 's/^# then: //p' "$spec")
  report
  "$kubectl" delete -f "$spec" --wait=true --timeout=90s >/dev/null
  "$kubectl" -n "$ns" wait --for=delete pod --all --timeout=90s >/dev/null 2>&1 || true
  steps after || failed=1
  "$kubectl" -n "$ns" delete events --all >/dev/null 2>&1 || true
  if [ -n "$node" ]; then
    "$cluster" remove-node "${node%%=*}" >/dev/null
  fi
done
[ "$failed" = 0 ] || { echo "!! some scenarios did not settle"; exit 1; }
log "Demo complete: every scenario ran through the real scheduler, kubelet, containerd and the Helm-installed gpudra driver."
