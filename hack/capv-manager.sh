#!/usr/bin/env bash
# Builds the manager of the Cluster API vSphere provider (CAPV) from source through the Go
# module proxy, because its container images are not pullable from where we build. The
# binary is cached per version outside the work tree; a warm call only prints its path.
#
#   ./hack/capv-manager.sh              -> prints the path of CAPV's manager binary
#   "$(./hack/capv-manager.sh)" --help  -> runs it
#
# CAPV_VERSION must resolve through the proxy. Checked on this machine (2026-11-29): v1.16.1 is served;
# v1.17.0, v1.17.1 and v1.16.2 are refused (403). v1.16.1 pins sigs.k8s.io/cluster-api v1.13.1
# with a replace directive (and controller-runtime v0.23.3, k8s.io/* v0.35.4, govmomi v0.53.0),
# so it cannot share a module with this repository's Cluster API v1.14.2: it is built in a
# scratch module of its own that requires CAPV and repeats CAPV's replace directives.
#
# The manager talks to Cluster API only through the API server, so a v1.13-built CAPV serving
# v1beta2 kinds next to a v1.14 core is the pairing clusterctl would install (docs/capv-on-vcsim.md).
set -euo pipefail

CAPV_VERSION="${CAPV_VERSION:-v1.16.1}"
CAPV_MODULE="sigs.k8s.io/cluster-api-provider-vsphere"

cache_root="${KAIROS_CAPI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kairos-capi}"
dest="$cache_root/capv/$CAPV_VERSION"
bin="$dest/manager"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

log() { echo "capv-manager: $*" >&2; }
log "building $CAPV_MODULE@$CAPV_VERSION (cold: 13 minutes at nice 19 on 2 busy cores, about 75 MB)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Outside the repository: go.work and the repository's go.mod files must not apply.
export GOWORK=off
export GOFLAGS="-mod=mod -trimpath"
export GOTOOLCHAIN=local
export CGO_ENABLED=0

capv_gomod="$(cd "$work" && go mod download -json "$CAPV_MODULE@$CAPV_VERSION" |
  sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
if [[ -z "$capv_gomod" || ! -f "$capv_gomod" ]]; then
  log "the module proxy did not serve $CAPV_MODULE@$CAPV_VERSION"
  exit 1
fi

# replaces prints CAPV's replace directives as "old[@version] new@version", one per line.
# `go mod edit -json` does the parsing; a replacement by a local path cannot be repeated
# outside CAPV's source tree, so it stops the build.
replaces() {
  go mod edit -json "$capv_gomod" | awk '
    /"Replace": \[/ { inrep = 1; next }
    inrep && /^\t\]/ { inrep = 0 }
    inrep && /"Old": \{/ { side = "old"; path = ""; ver = ""; next }
    inrep && /"New": \{/ { side = "new"; path = ""; ver = ""; next }
    inrep && /"Path":/ { gsub(/[",]/, "", $2); path = $2 }
    inrep && /"Version":/ { gsub(/[",]/, "", $2); ver = $2 }
    inrep && /^\t\t\t\}/ {
      s = path (ver != "" ? "@" ver : "")
      if (side == "old") old = s; else print old, s
    }'
}

(
  cd "$work"
  go mod init kairos-capi/capv-manager >/dev/null 2>&1
  # CAPV's main package is the module root. Importing it from a tools file keeps it in the
  # module graph for go mod tidy; go build then builds the command itself.
  cat >tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/cluster-api-provider-vsphere"
GO
  edits=("-require=$CAPV_MODULE@$CAPV_VERSION")
  while read -r old new; do
    [[ -n "$old" ]] || continue
    case "$new" in
    .* | /*)
      log "CAPV $CAPV_VERSION replaces $old with the local path $new: cannot repeat it"
      exit 1
      ;;
    esac
    log "repeating CAPV's replace $old => $new"
    edits+=("-replace=$old=$new")
  done < <(replaces)
  go mod edit "${edits[@]}"
  go mod tidy >/dev/null
  # The version is stamped like CAPV's own hack/version.sh does (pkg/version variables).
  major="${CAPV_VERSION#v}"
  minor="${major#*.}"
  go build -o "$work/manager" \
    -ldflags "-s -w -X '$CAPV_MODULE/pkg/version.gitVersion=$CAPV_VERSION' -X '$CAPV_MODULE/pkg/version.gitMajor=${major%%.*}' -X '$CAPV_MODULE/pkg/version.gitMinor=${minor%%.*}' -X '$CAPV_MODULE/pkg/version.gitTreeState=clean'" \
    "$CAPV_MODULE"
)
mkdir -p "$dest"
mv "$work/manager" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$bin"
