# shellcheck shell=bash
# Shared helpers of test/cluster/cluster.sh: messages, elapsed time, process
# management by PID file, readiness waits and mount cleanup. Sourced, not run.

# --- messages -------------------------------------------------------------

# now_ms prints the wall clock in milliseconds.
now_ms() {
	local t=${EPOCHREALTIME/[.,]/}
	echo $((t / 1000))
}

START_MS=$(now_ms)

# elapsed prints the seconds since START_MS with one decimal, e.g. "3.2".
elapsed() {
	local ms=$(($(now_ms) - START_MS))
	printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

# log prints a progress line with the elapsed time. Warnings and errors go
# to stderr.
log() {
	printf '[%6ss] %s\n' "$(elapsed)" "$*"
}

warn() {
	printf '[%6ss] WARNING: %s\n' "$(elapsed)" "$*" >&2
}

die() {
	printf '[%6ss] ERROR: %s\n' "$(elapsed)" "$*" >&2
	exit 1
}

# show_log prints the last lines of a component's log file.
show_log() {
	local component=$1 lines=${2:-30}
	local file="$LOG_DIR/$component.log"
	if [[ -s $file ]]; then
		printf -- '----- last %d lines of %s -----\n' "$lines" "$file" >&2
		tail -n "$lines" "$file" >&2
		printf -- '----- end of %s -----\n' "$file" >&2
	else
		printf -- '----- %s: no log output -----\n' "$file" >&2
	fi
}

# fail_component reports a failed readiness step with the component's log and
# exits non-zero; the EXIT trap of `up` tears the half-started cluster down.
fail_component() {
	local component=$1
	shift
	printf '[%6ss] ERROR: %s\n' "$(elapsed)" "$*" >&2
	show_log "$component" 30
	exit 1
}

# --- processes --------------------------------------------------------------

pid_file() { echo "$PID_DIR/$1.pid"; }

# component_pid prints the PID recorded for a component if that process is
# still alive and still one of ours (its command line names the cluster dir,
# which guards against a recycled PID). Returns 1 otherwise.
component_pid() {
	local file pid
	file=$(pid_file "$1")
	[[ -r $file ]] || return 1
	pid=$(<"$file")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	is_cluster_pid "$pid" || return 1
	echo "$pid"
}

# is_cluster_pid tells whether a PID is alive and belongs to this cluster.
is_cluster_pid() {
	local pid=$1 cmdline
	[[ -r /proc/$pid/cmdline ]] || return 1
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	[[ $cmdline == *"$CLUSTER_DIR/"* ]]
}

is_running() { component_pid "$1" >/dev/null; }

# start_component NAME CMD... runs CMD in the background in a session (and
# so a process group) of its own, stdin from /dev/null, stdout and stderr to
# logs/NAME.log, and records its PID. setsid does not fork here: a background
# child of a non-interactive shell is never a process-group leader, so $! is
# the PID of the component itself and also its process-group ID.
start_component() {
	local name=$1
	shift
	if is_running "$name"; then
		log "$name already running (pid $(component_pid "$name"))"
		return 0
	fi
	mkdir -p "$LOG_DIR" "$PID_DIR"
	{
		printf '=== %s: starting %s\n' "$(date -u +%FT%TZ)" "$name"
		printf '=== command:'
		printf ' %q' "$@"
		printf '\n'
	} >>"$LOG_DIR/$name.log"
	setsid "$@" </dev/null >>"$LOG_DIR/$name.log" 2>&1 &
	local pid=$! i
	echo "$pid" >"$(pid_file "$name")"
	# Until the child has exec'd, its command line is still this script's,
	# and is_cluster_pid would call it dead. Wait for the exec (or its exit).
	for ((i = 0; i < 250; i++)); do
		is_cluster_pid "$pid" && return 0
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.02
	done
}

# stop_pid PID [SIGNAL] ends a process and its process group: SIGNAL (TERM by
# default) first, then KILL after GPUDRA_STOP_TIMEOUT seconds.
stop_pid() {
	local pid=$1 sig=${2:-TERM} deadline
	deadline=$(($(now_ms) + STOP_TIMEOUT * 1000))
	signal_group "$pid" "$sig"
	while kill -0 "$pid" 2>/dev/null && ! is_zombie "$pid"; do
		if (($(now_ms) > deadline)); then
			warn "pid $pid did not stop within ${STOP_TIMEOUT}s, sending KILL"
			signal_group "$pid" KILL
			sleep 0.2
			break
		fi
		sleep 0.1
	done
	# Whatever is left in the group (children of the component) goes too.
	kill -KILL -- "-$pid" 2>/dev/null || true
}

# signal_group sends a signal to the process group led by PID (our components
# are session leaders) and to PID itself in case it left its group.
signal_group() {
	local pid=$1 sig=$2
	kill "-$sig" -- "-$pid" 2>/dev/null || true
	kill "-$sig" "$pid" 2>/dev/null || true
}

is_zombie() {
	local state
	state=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
	[[ $state == Z ]]
}

# stop_component NAME [SIGNAL] stops a component by its PID file.
stop_component() {
	local name=$1 sig=${2:-TERM} pid
	if pid=$(component_pid "$name"); then
		log "stopping $name (pid $pid, SIG$sig)"
		stop_pid "$pid" "$sig"
	fi
	rm -f "$(pid_file "$name")"
}

# COMPONENT_BINARIES are the programs a cluster runs.
COMPONENT_BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubelet gpudra-fake-cri
	gpu-kubelet-plugin gpu-controller)

# cluster_pids lists every live component process of this cluster, whether
# or not a PID file still knows it: one of COMPONENT_BINARIES whose command
# line names the cluster dir. Other programs that merely mention the dir (a
# kubectl with its kubeconfig, a tail of a log) are left alone.
cluster_pids() {
	local dir pid exe b
	for dir in /proc/[0-9]*; do
		pid=${dir#/proc/}
		exe=$(readlink "$dir/exe" 2>/dev/null) || continue
		exe=${exe% (deleted)}
		for b in "${COMPONENT_BINARIES[@]}"; do
			if [[ ${exe##*/} == "$b" ]] && is_cluster_pid "$pid"; then
				echo "$pid"
				break
			fi
		done
	done
}

# --- waiting ----------------------------------------------------------------

# wait_for TIMEOUT WHAT COMPONENTS CMD... polls CMD until it succeeds. While
# waiting, every component in the space-separated COMPONENTS list must stay
# alive; if one dies or the timeout passes, its log is shown and we exit.
wait_for() {
	local timeout=$1 what=$2 components=$3
	shift 3
	local deadline c
	deadline=$(($(now_ms) + timeout * 1000))
	while ! "$@" >/dev/null 2>&1; do
		for c in $components; do
			if ! is_running "$c"; then
				fail_component "$c" "$c exited while waiting for $what"
			fi
		done
		if (($(now_ms) > deadline)); then
			fail_component "${components##* }" "timed out after ${timeout}s waiting for $what"
		fi
		sleep "$POLL_INTERVAL"
	done
}

# socket_accepts tells whether a unix socket accepts connections; a socket
# file left behind by a killed process does not.
socket_accepts() {
	[[ -S $1 ]] || return 1
	python3 - "$1" <<-'EOF'
		import socket, sys
		s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
		s.settimeout(1)
		try:
		    s.connect(sys.argv[1])
		except OSError:
		    sys.exit(1)
		finally:
		    s.close()
	EOF
}

# https_ok URL succeeds when URL answers 200 "ok" to the admin client cert.
https_ok() {
	curl -sf --max-time 2 --cacert "$PKI_DIR/ca.crt" \
		--cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" "$1" | grep -qx ok
}

# --- mounts -----------------------------------------------------------------

# mounts_under DIR lists the mount points at or below DIR, deepest and most
# recently mounted first (reverse mountinfo order, then by depth).
mounts_under() {
	local dir=$1
	awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print NR, $5 }' /proc/self/mountinfo |
		awk '{ n = gsub("/", "/", $2); print n, $1, $2 }' |
		sort -k1,1nr -k2,2nr | awk '{ print $3 }'
}

# unmount_all DIR unmounts everything under DIR, deepest first, a few rounds
# because the kubelet stacks a bind mount of its root dir onto itself.
unmount_all() {
	local dir=$1 round mnt left
	for round in 1 2 3 4 5; do
		left=$(mounts_under "$dir")
		[[ -z $left ]] && return 0
		while IFS= read -r mnt; do
			[[ -z $mnt ]] && continue
			umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null ||
				warn "cannot unmount $mnt (round $round)"
		done <<<"$left"
	done
	left=$(mounts_under "$dir")
	[[ -z $left ]] || die "mounts left under $dir: $(echo "$left" | tr '\n' ' ')"
}
