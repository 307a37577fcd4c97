#!/usr/bin/env bash
# On failure: the operator's logs, events, experiments and every pod's logs, on stdout and in $E2E_LOG_DIR.
set -uo pipefail
source "$(dirname "$0")/env.sh"
mkdir -p "$E2E_LOG_DIR"

section() { printf '\n===== %s =====\n' "$*"; }
{
  section "operator logs"
  kubectl -n "$OPERATOR_NAMESPACE" logs deployment/kuberl --all-containers --tail=-1
  kubectl -n "$OPERATOR_NAMESPACE" logs deployment/kuberl --all-containers --previous --tail=-1 2>/dev/null
  section "experiments"
  kubectl get rlexperiments -A -o wide
  kubectl get rlexperiments -A -o yaml
  section "pods"
  kubectl get pods -A -o wide
  section "events"
  kubectl get events -A --sort-by=.lastTimestamp
} 2>&1 | tee "$E2E_LOG_DIR/cluster.txt"

for ns in "$E2E_NAMESPACE" "$OPERATOR_NAMESPACE"; do
  for pod in $(kubectl -n "$ns" get pods -o name 2>/dev/null); do
    name="${pod#pod/}"
    {
      section "$ns/$name: describe"
      kubectl -n "$ns" describe "$pod"
      section "$ns/$name: logs"
      kubectl -n "$ns" logs "$pod" --all-containers --tail=-1
      kubectl -n "$ns" logs "$pod" --all-containers --previous --tail=-1 2>/dev/null
    } > "$E2E_LOG_DIR/pod-$ns-$name.txt" 2>&1
    tail -n 60 "$E2E_LOG_DIR/pod-$ns-$name.txt"
  done
done
exit 0
