#!/usr/bin/env bash
# make bench-report: runs gpudra's benchmarks on the local cluster and writes
# _output/bench/report.md and report.json (figures, targets, reference
# drivers, machine) and performance.md, the page `make bench-docs` copies to
# docs/performance.md. The raw `go test -bench` outputs stay next to them.
#
# Environment: N_DRASOCK (dra.sock iterations per driver, 1000: a p99 is then the 10th slowest), N_PODS (pods per case,
# 50), N_START (plugin starts, 5), KEEP_CLUSTER=1 (leave the cluster up),
# BENCH_ONLY (space-separated subset of: unit drasock startup controller pods scale),
# SCALE_CLAIMS (claims of the in-process allocator benchmark; default 800 on
# whole GPUs, 20 on the dynamic-MIG shapes), SCALE_SHAPES
# (regexp of the cluster scale shapes, "whole-gpus"; "." adds dynamic-mig),
# REFERENCE_PLUGIN (a dra-example-kubeletplugin binary that drasock runs
# beside gpudra's plugin, case by case; REFERENCE_DESC describes it in the
# report, e.g. its commit; REFERENCE_PLUGIN_ARGS replaces its extra flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUTPUT:-$PWD/_output}/bench
mkdir -p "$out"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
only=" ${BENCH_ONLY:-unit drasock startup controller pods scale} "

# The containerd cluster (test/localcluster) with the chart-installed driver;
# the benchmarks find it running (E2E_KEEP_CLUSTER: no test takes it down).
# drasock and startup run a plugin of their own as a host process against its
# control plane (see BenchmarkDRASock); controller measures the chart's
# controller pod, pods the node's plugin pod.
cluster=_output/bin/gpudra-cluster
$cluster up
if [ "${KEEP_CLUSTER:-0}" != 1 ]; then
	trap '$cluster down >/dev/null' EXIT
fi
export E2E_KEEP_CLUSTER=1

e2e() { # name pattern benchtime
	[[ $only == *" $1 "* ]] || return 0
	echo "== $1: go test -tags e2e -run '^\$' -bench '$2' -benchtime $3 ./test/e2e/"
	go test -tags e2e -run '^$' -bench "$2" -benchtime "$3" -timeout 30m ./test/e2e/ | tee "$out/$1.txt"
}
if [[ $only == *" unit "* ]]; then
	echo "== unit: go test -run '^\$' -bench . -benchtime 2000x ./internal/plugin/prepare/"
	go test -run '^$' -bench . -benchtime 2000x ./internal/plugin/prepare/ | tee "$out/unit.txt"
fi
e2e drasock 'DRASock' "${N_DRASOCK:-1000}x"
e2e startup 'PluginStartup' "${N_START:-5}x"
e2e controller 'ControllerMemory' 1x
e2e pods 'PodCreateToRunning' "${N_PODS:-50}x"
if [[ $only == *" scale "* ]]; then
	echo "== scale-inproc: go test -run '^\$' -bench SchedulerAllocation -benchtime 1x ./internal/plugin/slice/"
	SCALE_CLAIMS=${SCALE_CLAIMS:-} go test -run '^$' -bench SchedulerAllocation -benchtime 1x -timeout 30m ./internal/plugin/slice/ | tee "$out/scale-inproc.txt"
fi
# The dynamic-MIG shape costs the scheduler ~30 ms per node filter: through
# the cluster, 800 claims take tens of minutes, so it runs only on request.
e2e scale "SchedulerScale/${SCALE_SHAPES:-whole-gpus}" 1x

inputs=()
for n in unit drasock startup controller pods scale-inproc scale; do
	[[ $only == *" ${n%-inproc} "* && -f $out/$n.txt ]] && inputs+=("$out/$n.txt")
done
go run ./test/cmd/bench-report -out "$out" \
	-machine "date=$(date -u +%Y-%m-%dT%H:%MZ)" \
	-machine "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	-machine "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
	-machine "cpus=$(nproc)" \
	-machine "memory=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)" \
	-machine "filesystem=$(findmnt -no FSTYPE,SOURCE -T "${GPUDRA_BENCH_DIR:-${TMPDIR:-/tmp}}" 2>/dev/null | tail -1 | tr -s ' ' || echo unknown)" \
	-machine "cdi=$(findmnt -no FSTYPE,SOURCE -T "${GPUDRA_BENCH_CDI_DIR:-/dev/shm}" 2>/dev/null | tail -1 | tr -s ' ' || echo unknown)" \
	-machine "go=$(go env GOVERSION)" \
	-machine "kubernetes=$(cat _output/bin/.kube-apiserver.version 2>/dev/null || echo unknown)" \
	-machine "containerd=$(cat _output/bin/.containerd.version 2>/dev/null || echo unknown)" \
	-machine "reference=${REFERENCE_PLUGIN:+$REFERENCE_PLUGIN (${REFERENCE_DESC:-no REFERENCE_DESC given})}" \
	-machine "load before=$load_before" \
	-machine "load after=$(cut -d' ' -f1-3 /proc/loadavg)" \
	"${inputs[@]}"
echo "wrote $out/report.md, $out/report.json and $out/performance.md (make bench-docs copies it to docs/performance.md)"
