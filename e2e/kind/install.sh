#!/usr/bin/env bash
# Install the chart with the locally built images, plus MinIO and its credentials for the experiments.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

kubectl create namespace "$E2E_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$E2E_NAMESPACE" create secret generic "$E2E_S3_SECRET" \
  --from-literal=AWS_ACCESS_KEY_ID=kuberl --from-literal=AWS_SECRET_ACCESS_KEY=kuberl-e2e-secret \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$E2E_NAMESPACE" apply -f e2e/kind/minio.yaml
kubectl -n "$E2E_NAMESPACE" rollout status deployment/minio --timeout=180s
kubectl -n "$E2E_NAMESPACE" wait --for=condition=complete job/minio-bucket --timeout=180s

helm upgrade --install kuberl charts/kuberl \
  --namespace "$OPERATOR_NAMESPACE" --create-namespace \
  --set image.repository="$IMAGE_REPO/kuberl-operator" --set image.tag="$IMAGE_TAG" \
  --set image.pullPolicy=Never \
  --set trainer.image.repository="$IMAGE_REPO/kuberl-trainer" --set trainer.image.tag="$IMAGE_TAG" \
  --set trainer.head.cpu=1 --set trainer.head.memory=2Gi \
  --set trainer.worker.cpu=500m --set trainer.worker.memory=1Gi \
  --set operator.statusPollSeconds=2 \
  --wait --timeout 5m
kubectl -n "$OPERATOR_NAMESPACE" rollout status deployment/kuberl --timeout=180s
kubectl get crd rlexperiments.kuberl.io
