#!/usr/bin/env bash
# Runs a command (make test runs every test through it) with TMPDIR set to a new, empty folder,
# and fails when the command passed but left something behind: a file or folder in that TMPDIR,
# or a process it started that still runs. Go's t.TempDir, os.MkdirTemp and os.CreateTemp, the
# envtest API servers and etcd, and every child process use TMPDIR, so one check covers every
# package, whichever ran beside which (go test -p), without a hook in each of them.
#
#   hack/leave-nothing.sh COMMAND [ARGS...]
#
# A failing command keeps its folder (a failing test keeps its logs there and says where) and
# this script prints it. A passing one must leave the folder empty; it is removed then.
#
# A process counts as left behind when its environment still has TMPDIR set to the folder, or to
# a folder below it (a sandbox run by a test gets its own below the test's). A process started
# with an environment of its own that drops TMPDIR is not seen.
set -uo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: hack/leave-nothing.sh COMMAND [ARGS...]" >&2
  exit 2
fi
dir="$(mktemp -d "${TMPDIR:-/tmp}/kairos-test-XXXXXX")" || exit 1

# Only the command gets the new TMPDIR: this script and what it runs below keep the caller's, so
# that they do not count as left behind.
TMPDIR="$dir" "$@"
status=$?
if [[ $status -ne 0 ]]; then
  echo "leave-nothing: '$*' failed (exit $status); its temporary files are kept in $dir" >&2
  exit "$status"
fi

# leftover_processes prints the processes whose TMPDIR is dir or below it (bash only: no process
# of this script's own is read).
leftover_processes() {
  local env pid kv
  for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}
    pid=${pid%/environ}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    while IFS= read -r -d '' kv; do
      if [[ $kv == "TMPDIR=$dir" || $kv == "TMPDIR=$dir/"* ]]; then
        echo "$pid"
        break
      fi
    done 2>/dev/null <"$env"
  done
}

# A test that stopped a process just before it ended may see it go a moment later.
left=()
for _ in $(seq 1 30); do
  mapfile -t left < <(leftover_processes)
  [[ ${#left[@]} -eq 0 ]] && break
  sleep 1
done
failed=0
if [[ ${#left[@]} -gt 0 ]]; then
  echo "leave-nothing: '$*' passed but left ${#left[@]} process(es) running, started under TMPDIR=$dir:" >&2
  ps -o pid,ppid,etime,args -p "$(IFS=,; echo "${left[*]}")" >&2 || true
  # They would run on with nobody to stop them: the listing above is what there is to know.
  kill -TERM "${left[@]}" 2>/dev/null || true
  sleep 5
  kill -KILL "${left[@]}" 2>/dev/null || true
  echo "leave-nothing: stopped them" >&2
  failed=1
fi

if [[ -n "$(find "$dir" -mindepth 1 -maxdepth 1 -print -quit)" ]]; then
  echo "leave-nothing: '$*' passed but left files in its TMPDIR; kept in $dir:" >&2
  find "$dir" -mindepth 1 -maxdepth 2 | head -50 | sed 's/^/  /' >&2
  exit 1
fi
rmdir "$dir"
exit "$failed"
