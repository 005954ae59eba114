#!/usr/bin/env bash
# The module gates of `make verify` (issue 10 §4). Every module of the workspace must:
#
#   1. be listed, with its version, in release/modules.yaml, and every go.mod must require its
#      sibling modules at those versions (release modules -check);
#   2. be tidy on its own: GOWORK=off go mod tidy -diff;
#   3. pin the versions the workspace selects: `go work sync` changes no go.mod or go.sum (the
#      test module raises dependencies; without this the shipped managers, built with
#      GOWORK=off, would differ from what the tests ran);
#   4. compile and vet on its own: GOWORK=off go vet ./... (what a consumer of its tag, and
#      goreleaser, compile). vet type-checks and compiles every package, tests included; a
#      `go build ./...` beside it would only add the links of the main packages (about 40
#      CPU-seconds across the modules, a fifth of this script), and goreleaser's build in the
#      release tests links the managers as shipped.
#
#   ./hack/verify-modules.sh common common/provider bootstrap/api ...   (make verify passes $(MODULES))
#
# Every gate runs and reports before the script fails. go work sync rewrites files in place:
# they are saved first and restored on exit, so the tree is left as it was.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ $# -eq 0 ]]; then
  echo "usage: $0 MODULE_FOLDER..." >&2
  exit 2
fi
modules=("$@")
failed=()

step() { printf '== %s\n' "$*"; }
fail() { failed+=("$1"); printf 'FAILED: %s\n' "$1"; }

# 0. The list of modules given is the workspace's (so that no module escapes the gates).
step "the modules given are the modules of go.work"
want="$(printf '%s\n' "${modules[@]}" | sort)"
have="$(go list -m -f '{{.Dir}}' | sed "s#^$root/##" | sort)"
if [[ "$want" != "$have" ]]; then
  diff <(echo "$want") <(echo "$have") || true
  fail "MODULES (<) and go.work (>) list different modules"
fi

# 1. release/modules.yaml and the requirements between the modules.
step "release modules -check"
(cd release && go run ./cmd/release modules -check) || fail "release/modules.yaml and the go.mod files differ: run 'cd release && go run ./cmd/release modules'"

# 2. go mod tidy, per module, on its own.
for m in "${modules[@]}"; do
  step "GOWORK=off go mod tidy -diff ($m)"
  (cd "$m" && GOWORK=off go mod tidy -diff) || fail "$m is not tidy: run 'cd $m && GOWORK=off go mod tidy'"
done

# 3. go work sync changes nothing.
step "go work sync changes no go.mod or go.sum"
backup="$(mktemp -d)"
saved=(go.work go.work.sum)
for m in "${modules[@]}"; do
  for f in "$m/go.mod" "$m/go.sum"; do
    [[ -f "$f" ]] && saved+=("$f")
  done
done
for f in "${saved[@]}"; do
  if [[ -f "$f" ]]; then
    mkdir -p "$backup/$(dirname "$f")"
    cp -p "$f" "$backup/$f"
  fi
done
restore() {
  for f in "${saved[@]}"; do
    if [[ -f "$backup/$f" ]]; then cp -p "$backup/$f" "$f"; fi
  done
  rm -rf "$backup"
}
trap restore EXIT
trap 'exit 130' INT TERM
if go work sync; then
  drift=()
  for f in "${saved[@]}"; do
    case "$f" in go.work | go.work.sum) continue ;; esac # go.work.sum only gathers checksums
    if ! cmp -s "$backup/$f" "$f"; then
      drift+=("$f")
      diff -u "$backup/$f" "$f" | head -40 || true
    fi
  done
  if [[ ${#drift[@]} -gt 0 ]]; then
    fail "go work sync changes ${drift[*]}: run 'go work sync', then 'GOWORK=off go mod tidy' in the changed modules, and commit"
  fi
else
  fail "go work sync failed"
fi
restore
trap - EXIT

# 4. Compile and vet, per module, on its own.
for m in "${modules[@]}"; do
  step "GOWORK=off go vet ./... ($m)"
  (cd "$m" && GOWORK=off go vet ./...) || fail "$m does not compile or vet with GOWORK=off"
done

if [[ ${#failed[@]} -gt 0 ]]; then
  printf '\nmodule gates failed:\n'
  printf '  - %s\n' "${failed[@]}"
  exit 1
fi
echo "module gates: ok"
