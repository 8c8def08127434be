#!/usr/bin/env bash
# Tests of demo/lib.sh (make unit): what the demo shows for what a container
# printed.
set -euo pipefail
# shellcheck source=demo/lib.sh
source "$(dirname "$0")/lib.sh"

declare -A products=([GPU-h1]="NVIDIA H100 80GB HBM3" [MIG-x]="NVIDIA H100 80GB HBM3 1g.10gb")
failed=0
check() {
  local name=$1 in=$2 want=$3 got
  got=$(gpu_list <<<"$in")
  if [ "$got" != "$want" ]; then
    printf 'FAIL %s\n  got:  %s\n  want: %s\n' "$name" "$got" "$want"
    failed=1
  fi
}

check "whole GPUs" \
  $'GPU 0: NVIDIA L4 (UUID: GPU-l4a)\nGPU 1: NVIDIA L4 (UUID: GPU-l4b)' \
  'NVIDIA L4 (GPU-l4a);NVIDIA L4 (GPU-l4b)'
check "the slice's product name wins" \
  'GPU 0: unknown product (UUID: GPU-h1)' \
  'NVIDIA H100 80GB HBM3 (GPU-h1)'
check "one MIG device replaces its GPU" \
  $'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n  MIG 3g.20gb     Device  0: (UUID: MIG-1)' \
  'MIG 3g.20gb of NVIDIA A100-SXM4-40GB (MIG-1)'
# demo 09's mig-pair: the container printed two MIG devices of one GPU.
check "two MIG devices of one GPU" \
  $'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n  MIG 1g.5gb      Device  0: (UUID: MIG-1)\n  MIG 1g.5gb      Device  1: (UUID: MIG-2)' \
  'MIG 1g.5gb of NVIDIA A100-SXM4-40GB (MIG-1);MIG 1g.5gb of NVIDIA A100-SXM4-40GB (MIG-2)'
check "MIG devices of two GPUs, a whole GPU after them" \
  $'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n  MIG 1g.5gb      Device  0: (UUID: MIG-1)\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-b)\n  MIG 2g.10gb     Device  0: (UUID: MIG-2)\n  MIG 1g.5gb      Device  1: (UUID: MIG-3)\nGPU 2: NVIDIA L4 (UUID: GPU-c)' \
  'MIG 1g.5gb of NVIDIA A100-SXM4-40GB (MIG-1);MIG 2g.10gb of NVIDIA A100-SXM4-40GB (MIG-2);MIG 1g.5gb of NVIDIA A100-SXM4-40GB (MIG-3);NVIDIA L4 (GPU-c)'
check "no profile in the line: the slice's" \
  $'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-h1)\n  MIG Device 0: GI 1 CI 0 (UUID: MIG-x)\n  MIG Device 1: GI 2 CI 0 (UUID: MIG-y)' \
  'MIG NVIDIA H100 80GB HBM3 1g.10gb of NVIDIA H100 80GB HBM3 (MIG-x);MIG device of NVIDIA H100 80GB HBM3 (MIG-y)'
check "nothing visible" \
  'gpudra-gpus: no GPU visible in this container' \
  'none: gpudra-gpus: no GPU visible in this container'

# gpu_log waits for the list: a fake kubectl whose log is empty on the first
# two reads (the container started, gpudra-gpus has not written yet). It runs
# in a command substitution, so it counts its reads in a file.
reads=$(mktemp)
trap 'rm -f "$reads"' EXIT
# shellcheck disable=SC2317 # called through $kubectl
fake_kubectl() {
  echo x >>"$reads"
  [ "$*" = "logs -n ns pod" ] || { echo "unexpected arguments: $*" >&2; return 2; }
  if [ "$(wc -l <"$reads")" -gt 2 ]; then echo 'GPU 0: NVIDIA L4 (UUID: GPU-l4a)'; fi
  return 0
}
# shellcheck disable=SC2317 # called through $kubectl
never() { echo "Error from server (BadRequest): container \"cuda\" in pod \"pod\" is waiting to start: ContainerCreating" >&2; return 1; }
kubectl=fake_kubectl
got=$(GPU_LOG_TRIES=5 gpu_log -n ns pod; echo "exit $?")
if [ "$got" != $'GPU 0: NVIDIA L4 (UUID: GPU-l4a)\nexit 0' ] || [ "$(wc -l <"$reads")" != 3 ]; then
  printf 'FAIL gpu_log waits for the list\n  got: %s (after %s reads)\n' "$got" "$(wc -l <"$reads")"
  failed=1
fi
# A container that never writes (or never starts): kubectl's last answer,
# and a failure.
kubectl=never
got=$(GPU_LOG_TRIES=2 gpu_log -n ns pod; echo "exit $?")
if [ "$got" != $'Error from server (BadRequest): container "cuda" in pod "pod" is waiting to start: ContainerCreating\nexit 1' ]; then
  printf 'FAIL gpu_log gives up\n  got: %s\n' "$got"
  failed=1
fi
unset kubectl

[ "$failed" = 0 ] && echo "demo/lib_test.sh: ok"
exit "$failed"
