#!/usr/bin/env bash
# Delete the kind cluster (only the one these scripts created, by name).
set -euo pipefail
source "$(dirname "$0")/env.sh"
kind delete cluster --name "$KIND_CLUSTER"
