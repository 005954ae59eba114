#!/usr/bin/env bash
# Runs one Go fuzz target for a bounded time: hack/fuzz.sh <module>/<package> <FuzzTarget> <fuzztime>.
#
# A finding fails the run: Go writes the input to the package's testdata/fuzz/<FuzzTarget>/ and
# prints "Failing input written to". Go 1.26's fuzz coordinator also fails a target with a bare
# "context deadline exceeded" when -fuzztime expires while a worker is still running an input
# (golang/go#75804, fixed in Go 1.27), with nothing written: that exit is not a finding. It is
# accepted only when no new input was written and the target's whole corpus (seeds and
# testdata) then passes as a plain test; anything else fails.
set -uo pipefail
pkg=$1 fn=$2 fuzztime=$3
module=${pkg%%/*} rel=./${pkg#*/}
cd "$module"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# -fuzzminimizetime: Go minimizes every new interesting input for up to a minute by default,
# and the coordinator counts no executions meanwhile. FuzzMerge's seeds are the 24 KB rendered
# goldens: both workers spent the whole -fuzztime minimizing (23 executions in 15 s, nothing
# new); with 2 s, 14,599 executions and 24 new inputs in the same 15 s (measured 2026-11-28).
go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$fuzztime" -fuzzminimizetime=2s "$rel" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -eq 0 ]; then
	exit 0
fi
if grep -q 'Failing input written to\|panic:' "$log" || ! grep -q 'context deadline exceeded' "$log"; then
	exit "$status"
fi
echo "== $fn: the fuzz coordinator's end-of-time race (golang/go#75804), no input written; replaying the corpus"
go test -count=1 -run="^${fn}\$" "$rel"
