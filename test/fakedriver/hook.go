package fakedriver

// hookScript is the fake root's RecordHook, which the local cluster's NRI
// plugin (test/cmd/gpudra-sim-nri) adds to every container as a
// createContainer hook; runc runs it with the container's state (JSON: id,
// pid, bundle, ...) on stdin, after the CDI edits are in the bundle. It
// changes nothing in the container and exits at once for a container without
// simulated GPUs. It records the container as a compute process of the simulated
// GPUs it got (var/lib/gpudra-sim/processes/<id>.json, sim.Process; the GPUs
// from the GPUDRA_GPU_* and GPUDRA_MIG_* variables of the bundle's
// config.json), for as long as the container lives:
//
//   - The helper must live in the container's PID namespace: when the
//     container's init exits, the kernel kills every other process of that
//     namespace, the helper included. Where the hook runs depends on the
//     runtime: the runc of the local cluster runs createContainer hooks from
//     its init, already in the container's PID namespace, where the state's
//     pid is 1 (the init itself); a runtime that runs them in its own
//     namespaces passes the init's host PID. So with pid 1 the helper is
//     started where the hook runs, else in the init's PID namespace (nsenter
//     --pid; a host's own PID 1 is never a container's init).
//   - The hook itself takes a flock on <id>.lock through a file descriptor,
//     writes the record, and starts the helper, a sleep that inherits the
//     descriptor and so holds the lock; the simulated NVML treats a record
//     whose lock nobody holds as dead and drops it (test/sim/processes.go).
//     Nothing is opened by path after the hook returns: runc's init
//     pivots into the container's root right after the hooks.
//   - The helper's standard streams are /dev/null, it keeps no other
//     descriptor of the hook's but the lock (runc's init gives its hooks its
//     own, among them the exec FIFO that a start waits on), and it runs in a
//     session of its own, so runc, which reads the hook's output until EOF,
//     does not wait for it.
//
// Run again for the same container (a second hook entry), it finds the lock
// taken and does nothing. Whatever fails, it exits 0: a failing hook stops the
// container. Without a pid (or, outside the container, nsenter) nothing is
// recorded, since a record that outlives its container would show load
// forever.
const hookScript = `#!/bin/sh
# record-process of a fake driver root (gpudra test/fakedriver, hook.go):
# records the container as a process of the simulated GPUs it got, for as
# long as the container's PID namespace lives; changes nothing in it.
root=$(cd "$(dirname "$0")/../../.." 2>/dev/null && pwd) || exit 0
dir="$root/var/lib/gpudra-sim/processes"
state=$(cat 2>/dev/null)
id=$(printf '%s' "$state" | sed -n 's/.*"id" *: *"\([A-Za-z0-9_.-]*\)".*/\1/p')
pid=$(printf '%s' "$state" | sed -n 's/.*"pid" *: *\([0-9][0-9]*\).*/\1/p')
bundle=$(printf '%s' "$state" | sed -n 's/.*"bundle" *: *"\([^"]*\)".*/\1/p')
[ -n "$id" ] && [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "$bundle/config.json" ] || exit 0
for tool in flock setsid sleep; do command -v "$tool" >/dev/null 2>&1 || exit 0; done
enter=""
if [ "$pid" != 1 ]; then
	command -v nsenter >/dev/null 2>&1 || exit 0
	enter="nsenter --target $pid --pid --"
fi
devices=$(grep -o 'GPUDRA_\(GPU\|MIG\)_[0-9_]*=[A-Za-z0-9-]*' "$bundle/config.json" 2>/dev/null |
	cut -d= -f2 | sort -u | sed 's/.*/"&"/' | paste -sd, -)
[ -n "$devices" ] || exit 0
mkdir -p "$dir" 2>/dev/null || exit 0
exec 9>>"$dir/$id.lock" || exit 0
flock -n 9 || exit 0
printf '{"name":"%s","devices":[%s]}' "$id" "$devices" >"$dir/$id.tmp" && mv "$dir/$id.tmp" "$dir/$id.json" || exit 0
$enter setsid sleep infinity </dev/null >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- &
exit 0
`
