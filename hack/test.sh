#!/usr/bin/env bash
# make test: what the e2e suite needs built (make e2e-deps) with the suite's
# race-built test binary compiled beside it, then the e2e suite in the
# foreground and the unit tests (go vet first) beside it at nice 10.
#
# The e2e suite mostly waits on the local cluster: on 2 cores the machine was
# 21 % busy during it (measured, docs/development.md), so the unit tests' race
# builds and runs fit in what it leaves. At nice 10 the unit tests get a
# tenth of the CPU where both want it (CFS weights 110 against 1024), so the
# cluster keeps its timing. The e2e test binary is compiled before the unit
# tests start, so that the two go commands do not compile the same race-built
# packages twice, and beside the builds, whose links and cgo steps leave a
# core idle; it shares no package with them (they are not race-built).
#
# The unit tests' output is printed after the e2e suite's (whose output ends
# with each failed e2e test again); it fails if either fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MAKE=${MAKE:-make}
start=$SECONDS
say() { echo "== [test $((SECONDS - start))s] $*"; }

say "the e2e suite's builds (make e2e-deps), and beside them its test binary (race)"
"${GO:-go}" test -tags e2e -race -c -o /dev/null ./test/e2e/ &
compile=$!
deps=0
"$MAKE" --no-print-directory e2e-deps || deps=$?
compiled=0
wait "$compile" || compiled=$?
if [ "$deps" != 0 ] || [ "$compiled" != 0 ]; then
  say "the builds failed (make e2e-deps exit status $deps, the e2e test binary's compile $compiled)"
  exit 1
fi

unit_log=$(mktemp)
trap 'rm -f "$unit_log"' EXIT
say "unit tests at nice 10, beside the e2e suite; their output comes after the suite's"
( nice -n 10 "$MAKE" --no-print-directory unit >"$unit_log" 2>&1 ) &
unit=$!

say "e2e suite"
e2e=0
"$MAKE" --no-print-directory e2e || e2e=$?

say "e2e suite done (exit status $e2e); waiting for the unit tests"
units=0
wait "$unit" || units=$?
say "unit tests' output (exit status $units)"
cat "$unit_log"
say "done: e2e exit status $e2e, unit exit status $units"
[ "$e2e" = 0 ] && [ "$units" = 0 ]
