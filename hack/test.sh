#!/usr/bin/env bash
# The go test runs of `make test` (after make verify): every module's tests, exit 1 on any failure.
#
#   ./hack/test.sh common common/provider ... test     (the Makefile passes $(MODULES))
#
# Unit-test modules build and run their packages side by side (go test's default -p). The test
# module's packages start API servers and etcd members, so they are grouped (measured on 2 cores,
# README "Test times"):
#   1. test/lifecycle alone in its go test, which runs six scenarios side by side and leaves the
#      machine about a quarter idle;
#   2. beside it, one at a time, the test module's light packages (one API server each, or none);
#   3. then, one at a time, the heavy ones: test/clusterctl and test/simnode (several management
#      or workload clusters side by side each), the sandbox, and the bench smoke, whose storm
#      test needs the machine to itself (its manager lost its leader election beside lifecycle).
#
# Environment: GO_TEST_FLAGS (default -count=1), TEST_TIMEOUT (default 60m), TEST_JSON_DIR (keep
# each run's go test -json stream there instead of printing it; hack/test-times.sh reads them),
# KUBEBUILDER_ASSETS (envtest binaries).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
flags=(${GO_TEST_FLAGS:--count=1} -timeout "${TEST_TIMEOUT:-60m}")

# gotest NAME DIR ARGS...: go test in DIR, its JSON kept as NAME.json when TEST_JSON_DIR is set.
gotest() {
  local name=$1 dir=$2
  shift 2
  if [[ -n "${TEST_JSON_DIR:-}" ]]; then
    (cd "$root/$dir" && go test "${flags[@]}" "$@" -json >"$TEST_JSON_DIR/$name.json")
  else
    (cd "$root/$dir" && go test "${flags[@]}" "$@")
  fi
}

heavy=(./clusterctl ./simnode ./cmd/sandbox ./bench/...)
status=0
for m in "$@"; do
  if [[ "$m" != test ]]; then
    echo "== go test ./$m/..."
    gotest "$(echo "$m" | tr / -)" "$m" ./... || status=1
    continue
  fi
  light=$(cd "$root/test" && go list ./... | grep -v -e '/test/lifecycle$' -e '/test/clusterctl$' -e '/test/simnode$' -e '/test/cmd/sandbox$' -e '/test/bench/')
  echo "== go test ./test/lifecycle, beside it the light packages of ./test/... one at a time"
  gotest test-lifecycle test ./lifecycle &
  lifecycle=$!
  # shellcheck disable=SC2086 # package paths
  gotest test-light test -p 1 $light || status=1
  wait "$lifecycle" || status=1
  echo "== go test ${heavy[*]} (in ./test, one at a time)"
  gotest test-heavy test -p 1 "${heavy[@]}" || status=1
done
exit "$status"
