package fakedriver

// hookScript is the fake root's nvidia-cdi-hook, which the CDI specs that
// nvcdi makes run as createContainer hooks, with the container's state
// (JSON: id, pid, bundle, ...) on stdin. It changes nothing in the
// container. It records the container as a compute process of the simulated
// GPUs it got (var/lib/gpudra-sim/processes/<id>.json, sim.Process; the GPUs
// from the GPUDRA_GPU_* and GPUDRA_MIG_* variables of the bundle's
// config.json), for as long as the container lives:
//
//   - runc runs the hook in the runtime's namespaces, not the container's, so
//     the hook itself cannot tie anything to the container's life. It starts
//     a helper in the container's PID namespace (nsenter --pid to the state's
//     pid, the container's init, already created when createContainer hooks
//     run). When the container's init exits the kernel kills every other
//     process of that namespace, the helper included.
//   - The helper holds a flock on <id>.lock and writes the record once it
//     holds it; the simulated NVML treats a record whose lock nobody holds as
//     dead and drops it (test/sim/processes.go).
//   - The helper's standard streams are /dev/null and it runs in a session
//     of its own, so runc, which reads the hook's output until EOF, does not
//     wait for it.
//
// The hook runs once per hook of the spec: the first one records, the others
// find the lock taken. Whatever fails, it exits 0: a failing hook stops the
// container. Without a pid (or nsenter) nothing is recorded, since a record
// that outlives its container would show load forever.
const hookScript = `#!/bin/sh
# nvidia-cdi-hook of a fake driver root (gpudra test/fakedriver, hook.go):
# records the container as a process of the simulated GPUs it got, for as
# long as the container's PID namespace lives; changes nothing in it.
root=$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd) || exit 0
dir="$root/var/lib/gpudra-sim/processes"
state=$(cat 2>/dev/null)
id=$(printf '%s' "$state" | sed -n 's/.*"id" *: *"\([A-Za-z0-9_.-]*\)".*/\1/p')
pid=$(printf '%s' "$state" | sed -n 's/.*"pid" *: *\([0-9][0-9]*\).*/\1/p')
bundle=$(printf '%s' "$state" | sed -n 's/.*"bundle" *: *"\([^"]*\)".*/\1/p')
[ -n "$id" ] && [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "$bundle/config.json" ] || exit 0
for tool in flock setsid nsenter sleep; do command -v "$tool" >/dev/null 2>&1 || exit 0; done
devices=$(grep -o 'GPUDRA_\(GPU\|MIG\)_[0-9_]*=[A-Za-z0-9-]*' "$bundle/config.json" 2>/dev/null |
	cut -d= -f2 | sort -u | sed 's/.*/"&"/' | paste -sd, -)
[ -n "$devices" ] || exit 0
mkdir -p "$dir" 2>/dev/null || exit 0
record="{\"name\":\"$id\",\"devices\":[$devices]}"
nsenter --target "$pid" --pid -- setsid flock -n "$dir/$id.lock" \
	sh -c 'printf "%s" "$1" >"$2.tmp" && mv "$2.tmp" "$2.json" && exec sleep infinity' \
	hook "$record" "$dir/$id" </dev/null >/dev/null 2>&1 &
exit 0
`
