#!/usr/bin/env bash
# The whole kind e2e: cluster up, images loaded, chart installed, then the same scenarios as
# `make e2e` with E2E_CLUSTER=kind. On failure it prints the operator logs, events and pod logs.
# Needs docker, kind, and `make install tools` (helm and kubectl land in .tools/bin).
set -euo pipefail
HERE="$(dirname "$0")"
source "$HERE/env.sh"
cd "$ROOT"

on_exit() {
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "kind e2e failed (exit $status): collecting logs" >&2
    "$HERE/dump-logs.sh"
  fi
  if [ "${KEEP_CLUSTER:-0}" != "1" ]; then
    "$HERE/down.sh" || true
  fi
  exit "$status"
}
trap on_exit EXIT

"$HERE/up.sh"
"$HERE/install.sh"
"$HERE/kueue.sh"
make e2e E2E_CLUSTER=kind
