# Functions of demo/run.sh that need no cluster, sourced by it and tested by
# demo/lib_test.sh (make unit).
# shellcheck shell=bash

# gpu_list reads what gpudra-gpus printed in a container ("GPU n: ...
# (UUID: X)" lines, like nvidia-smi -L, each MIG device indented under its
# GPU) and prints one line: the devices it sees, separated by ';', MIG
# devices instead of their GPU, with the product names of the associative
# array products (UUID -> "product [MIG profile]", from the ResourceSlices).
gpu_list() {
  local out line uuid profile parent='?' list=() gpu_last=0
  out=$(cat)
  while IFS= read -r line; do
    if [[ $line =~ \(UUID:\ ([^\)]+)\) ]]; then
      uuid=${BASH_REMATCH[1]}
      if [[ $line =~ ^[[:space:]]+MIG[[:space:]] ]]; then
        # The GPU's own entry gives way to its first MIG device, only to
        # that one: a GPU's second MIG device keeps the first.
        [ "$gpu_last" = 1 ] && unset 'list[${#list[@]}-1]'
        gpu_last=0
        # "  MIG 1g.10gb     Device  0: (UUID: MIG-...)", like nvidia-smi -L;
        # the parent's line above it names the product.
        read -r _ profile _ <<<"$line"
        [ "$profile" = Device ] && profile=${products[$uuid]:-device}
        list+=("MIG $profile of $parent ($uuid)")
      else
        parent=${products[$uuid]:-$(sed -E 's/^GPU [0-9]+: (.*) \(UUID: .*$/\1/' <<<"$line")}
        list+=("$parent ($uuid)")
        gpu_last=1
      fi
    fi
  done <<<"$out"
  if [ ${#list[@]} -eq 0 ]; then echo "none: $(head -c 150 <<<"$out")"; else (IFS=';'; echo "${list[*]}"); fi
}

# gpu_log [kubectl logs arguments]: the log of a workload container once it
# has written what it prints at start (gpudra-gpus' GPU list, or the
# variables a manifest's own command prints; each comes in one write). A pod
# is Ready when its container has started, which can be a moment before
# that: reading the log right after `kubectl wait --for=condition=Ready`
# found it empty now and then. Tries for GPU_LOG_TRIES half seconds
# (default 60: 30 s), then prints the log as it is and fails. kubectl is
# $kubectl if set (demo/run.sh), else the one on PATH.
gpu_log() {
  local out='' i
  for ((i = 0; i < ${GPU_LOG_TRIES:-60}; i++)); do
    if out=$("${kubectl:-kubectl}" logs "$@" 2>&1) && [ -n "$out" ]; then
      printf '%s\n' "$out"
      return 0
    fi
    sleep 0.5
  done
  printf '%s\n' "$out"
  return 1
}
