#!/usr/bin/env bash
# Times `make test` and prints the wall time, the time of every package and the slowest tests,
# from go test's own JSON (test/cmd/testtimes). The README's "Test times" table comes from it.
#
#   ./hack/test-times.sh            warm: the Go caches and envtest assets as they are
#   COLD=1 ./hack/test-times.sh     cold: empty Go module and build caches and envtest assets,
#                                   in a scratch folder (the shared caches are left alone)
#
# OUT (default: a new temporary folder) keeps the JSON streams and the report.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-$(mktemp -d -t kairos-test-times-XXXXXX)}"
mkdir -p "$out"
if [[ "${COLD:-}" == 1 ]]; then
  scratch="$out/cold-caches"
  mkdir -p "$scratch"
  export GOMODCACHE="$scratch/gomod" GOCACHE="$scratch/gocache" XDG_CACHE_HOME="$scratch/xdg"
  # A module cache that can be removed afterwards without chmod.
  export GOFLAGS="${GOFLAGS:-} -modcacherw"
  unset KAIROS_CAPI_CACHE GORELEASER
  echo "test-times: cold caches in $scratch"
fi

start=$(date +%s)
stamp() { local now; while IFS= read -r line; do printf -v now '%(%s)T' -1; printf '%5d %s\n' $(( now - start )) "$line"; done; }
status=0
# Each line of make's log starts with the seconds since the start, so that the phases without
# a JSON stream (verify, the envtest and goreleaser builds) can be timed too.
make test TEST_JSON_DIR="$out" 2>&1 | stamp >"$out/make.log" || status=$?
wall=$(( $(date +%s) - start ))

report="$out/report.md"
{
  echo "make test: exit $status in ${wall} s ($(( wall / 60 )) min $(( wall % 60 )) s), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)${COLD:+, cold caches}"
  echo
  (cd test && go run ./cmd/testtimes "$out"/*.json) || true
  echo
  echo "Phases (seconds since the start, from make's log):"
  echo
  grep -E '^ *[0-9]+ (== |envtest-assets: |envtest assets: |goreleaser: |module gates|go vet \./test/)' "$out/make.log" | sed 's/^/    /' || true
} >"$report"
cat "$report"
echo "test-times: JSON streams, make's log and this report are in $out"
if [[ $status -ne 0 ]]; then
  echo "test-times: make test failed; the end of its log:"
  tail -40 "$out/make.log"
fi
exit "$status"
