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

if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export GOWORK=off

log() { echo "envtest-assets: $*" >&2; }

if [[ ! -x "$dest/etcd" ]]; then
  log "building etcd v$ETCD_VERSION (about 2 minutes cold)"
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
    go build -trimpath -o "$dest/etcd.tmp" .
  )
  mv "$dest/etcd.tmp" "$dest/etcd"
fi

if [[ ! -x "$dest/kube-apiserver" ]]; then
  log "building kube-apiserver v$KUBE_VERSION (about 7 minutes cold)"
  mkdir -p "$work/apiserver"
  kgomod="$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  {
    echo "module envtest/apiserver"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    # kubernetes replaces its staging modules with local paths; pin them to released versions.
    grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$kgomod" |
      awk -v v="v$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } >"$work/apiserver/go.mod"
  cat >"$work/apiserver/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  (
    cd "$work/apiserver"
    go mod tidy >/dev/null 2>&1 || go mod download
    go build -trimpath -o "$dest/kube-apiserver.tmp" \
      -ldflags "-X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=${KUBE_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)" \
      k8s.io/kubernetes/cmd/kube-apiserver
  )
  mv "$dest/kube-apiserver.tmp" "$dest/kube-apiserver"
fi

echo "$dest"
