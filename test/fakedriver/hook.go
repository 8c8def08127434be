package fakedriver

// hookScript is the fake root's nvidia-cdi-hook, which the CDI specs that
// nvcdi makes run as createContainer hooks: inside the new container's
// namespaces, before its root is switched, with the container's state
// (JSON: id, bundle, ...) on stdin. It changes nothing in the container. It
// records the container as a compute process of the simulated GPUs it got
// (var/lib/gpudra-sim/processes/<id>.json, sim.Process; the GPUs from the
// GPUDRA_GPU_* and GPUDRA_MIG_* variables of the bundle's config.json): a
// helper (sleep) started in the container's PID namespace holds a flock on
// <id>.lock and writes the record once it holds it; when the container
// ends, the kernel kills the helper, the lock is free and the simulated
// NVML drops the record (pkg/nvmllib/sim/processes.go). The hook runs once
// per hook of the spec: the first one records, the others find the lock
// taken. Whatever fails, it exits 0: a failing hook stops the container.
// noopHookScript is the nvidia-cdi-hook the roots get: it does nothing.
// hookScript is not installed: runc runs createContainer hooks in the
// runtime's namespaces, not the container's, so its helper outlived the
// container on the containerd cluster (the record never went away) and a
// container start hung there; its process records are written by the fast
// cluster's fake runtime only (see README, GPU telemetry).
const noopHookScript = "#!/bin/sh\n# nvidia-cdi-hook of a fake driver root (gpudra test/fakedriver): does nothing.\ncat >/dev/null 2>&1\nexit 0\n"

const hookScript = `#!/bin/sh
# nvidia-cdi-hook of a fake driver root (gpudra test/fakedriver, hook.go):
# records the container as a process of the simulated GPUs it got; changes
# nothing in the container.
root=$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd) || exit 0
dir="$root/var/lib/gpudra-sim/processes"
state=$(cat 2>/dev/null)
id=$(printf '%s' "$state" | sed -n 's/.*"id" *: *"\([A-Za-z0-9_.-]*\)".*/\1/p')
bundle=$(printf '%s' "$state" | sed -n 's/.*"bundle" *: *"\([^"]*\)".*/\1/p')
[ -n "$id" ] && [ -r "$bundle/config.json" ] || exit 0
command -v flock >/dev/null 2>&1 && command -v setsid >/dev/null 2>&1 || exit 0
devices=$(grep -o 'GPUDRA_\(GPU\|MIG\)_[0-9_]*=[A-Za-z0-9-]*' "$bundle/config.json" 2>/dev/null |
	cut -d= -f2 | sort -u | sed 's/.*/"&"/' | paste -sd, -)
[ -n "$devices" ] || exit 0
mkdir -p "$dir" 2>/dev/null || exit 0
record="{\"name\":\"$id\",\"devices\":[$devices]}"
setsid flock -n "$dir/$id.lock" sh -c 'printf "%s" "$1" >"$2.tmp" && mv "$2.tmp" "$2.json" && exec sleep infinity' \
	hook "$record" "$dir/$id" </dev/null >/dev/null 2>&1 &
exit 0
`
