#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd) from source through the Go
# module proxy, because setup-envtest's downloads are not reachable from where we build.
# The result is cached per version outside the work tree; a warm call only prints the path.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-1.36.3}"
STAGING_VERSION="${STAGING_VERSION:-0.36.3}"
ETCD_VERSION="${ETCD_VERSION:-3.6.14}"

cache_root="${KAIROS_CAPI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kairos-capi}"
dest="$cache_root/envtest/k8s-$KUBE_VERSION-etcd-$ETCD_VERSION"

if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" && -x "$dest/kube-controller-manager" ]]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export GOWORK=off

log() { echo "envtest-assets: $*" >&2; }

# requires prints the "path version" requirements of a go.mod file.
requires() {
  awk '/^require \(/ { block = 1; next } block && /^\)/ { block = 0; next }
    block && NF >= 2 { print $1, $2 } /^require [^(]/ { print $2, $3 }' "$1"
}

# align requires, in the module of the current folder, every module that the go.mod file $1
# requires and that the test module requires too, at the test module's version (MVS then
# selects the higher of that and the release's own pin). A package is compiled once for every
# build that uses the same versions of it and of what it imports: aligned, the API server's and
# etcd's builds find client-go, apimachinery, grpc, the etcd client and the rest of what they
# share with the test module in the build cache that make verify filled, instead of compiling
# the older versions their releases pin (README "Test times" has the measurement). The versions
# differ by patch and minor releases of libraries that keep their APIs; the build fails loudly
# if one does not.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
align() {
  local args=() path theirs ours
  while read -r path theirs ours; do
    # Where the release pins a newer version, the release's own go.mod (in the module graph)
    # still requires it and MVS keeps it.
    [[ "$theirs" == "$ours" ]] || args+=("-require=$path@$ours")
  done < <(LC_ALL=C join <(requires "$1" | LC_ALL=C sort) <(requires "$root/test/go.mod" | LC_ALL=C sort))
  if [[ ${#args[@]} -gt 0 ]]; then go mod edit "${args[@]}"; fi
}

if [[ ! -x "$dest/etcd" ]]; then
  log "building etcd v$ETCD_VERSION (1 to 2 minutes cold)"
  mkdir -p "$work/etcd"
  cat >"$work/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (
    cd "$work/etcd"
    go mod init envtest/etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1
    go mod tidy >/dev/null 2>&1
    align go.mod
    go mod tidy >/dev/null 2>&1
    go build -trimpath -o "$dest/etcd.tmp" .
  )
  mv "$dest/etcd.tmp" "$dest/etcd"
fi

# kube-apiserver, and kube-controller-manager for its garbage collector and namespace controller
# (the lifecycle harness and the sandbox run them so that deleting a cluster really deletes what
# it owns). One module and one go build: the two share most of their packages.
missing=()
for b in kube-apiserver kube-controller-manager; do
  [[ -x "$dest/$b" ]] || missing+=("$b")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "building ${missing[*]} v$KUBE_VERSION (7 to 11 minutes cold: less when make verify has compiled the libraries they share with the tests)"
  mkdir -p "$work/kube"
  kgomod="$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  {
    echo "module envtest/kube"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    # kubernetes replaces its staging modules with local paths; pin them to released versions.
    grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$kgomod" |
      awk -v v="v$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } >"$work/kube/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    for b in "${missing[@]}"; do echo "import _ \"k8s.io/kubernetes/cmd/$b\""; done
  } >"$work/kube/tools.go"
  (
    cd "$work/kube"
    align "$kgomod"
    go mod tidy >/dev/null 2>&1 || go mod download
    mkdir -p "$work/out"
    pkgs=()
    for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    go build -trimpath -o "$work/out/" \
      -ldflags "-X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=${KUBE_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)" \
      "${pkgs[@]}"
  )
  for b in "${missing[@]}"; do mv "$work/out/$b" "$dest/$b"; done
fi

echo "$dest"
