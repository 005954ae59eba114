#!/usr/bin/env bash
# Builds a pinned goreleaser (open-source edition) from source through the Go module proxy,
# because release binaries are not downloadable from where we build. The binary is cached
# per version outside the work tree; a warm call only prints its path.
#
#   ./hack/goreleaser.sh            -> prints the path of the goreleaser binary
#   "$(./hack/goreleaser.sh)" check -> runs it
#
# GORELEASER_VERSION must build with the Go toolchain in use and resolve through the proxy:
# v2.18.x needs go 1.27 (not available here); v2.16.0-v2.17.x need go.digitalxero.dev/go-msix,
# which the module proxy refuses (403). v2.15.1 is the newest release that builds here.
set -euo pipefail

GORELEASER_VERSION="${GORELEASER_VERSION:-v2.15.1}"

cache_root="${KAIROS_CAPI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kairos-capi}"
dest="$cache_root/goreleaser/$GORELEASER_VERSION"
bin="$dest/goreleaser"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

echo "goreleaser: building github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION (cold: several minutes)" >&2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(
  # Outside the repository: go.work and the repository's go.mod files must not apply.
  cd "$work"
  export GOWORK=off
  export GOFLAGS="-mod=mod"
  export GOTOOLCHAIN=local
  # The version is stamped into `goreleaser --version` like upstream release builds do.
  GOBIN="$work/bin" go install -trimpath \
    -ldflags "-s -w -X main.version=${GORELEASER_VERSION#v} -X main.builtBy=kairos-capi-hack" \
    "github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION"
)
mkdir -p "$dest"
mv "$work/bin/goreleaser" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$bin"
