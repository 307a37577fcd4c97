#!/usr/bin/env bash
# Create the kind cluster, build the images and load them into its nodes.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

for tool in docker kind helm kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e/kind needs $tool on PATH (helm and kubectl: make tools)" >&2; exit 1; }
done

if ! kind get clusters | grep -qx "$KIND_CLUSTER"; then
  kind create cluster --name "$KIND_CLUSTER" --config e2e/kind/kind-config.yaml --wait 180s
fi
kubectl config use-context "kind-$KIND_CLUSTER"

make images IMAGE_REPO="$IMAGE_REPO" IMAGE_TAG="$IMAGE_TAG" IMAGES="operator trainer"
kind load docker-image --name "$KIND_CLUSTER" "$OPERATOR_IMAGE" "$TRAINER_IMAGE"
