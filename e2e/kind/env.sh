# Settings shared by the kind scripts (sourced, not run). Override any of them from the environment.
# shellcheck shell=bash
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH="$ROOT/.tools/bin:$PATH"
export KIND_CLUSTER="${KIND_CLUSTER:-kuberl-e2e}"
export IMAGE_REPO="${IMAGE_REPO:-kuberl.local}"
export IMAGE_TAG="${IMAGE_TAG:-e2e}"
export OPERATOR_IMAGE="$IMAGE_REPO/kuberl-operator:$IMAGE_TAG"
export TRAINER_IMAGE="$IMAGE_REPO/kuberl-trainer:$IMAGE_TAG"
export OPERATOR_NAMESPACE="${OPERATOR_NAMESPACE:-kuberl-system}"
# What the e2e scenarios read when E2E_CLUSTER=kind.
export E2E_CLUSTER=kind
export E2E_NAMESPACE="${E2E_NAMESPACE:-kuberl-e2e}"
export E2E_STORAGE_URI="${E2E_STORAGE_URI:-s3://kuberl-e2e/runs}"
export E2E_S3_ENDPOINT="${E2E_S3_ENDPOINT:-http://minio.$E2E_NAMESPACE.svc.cluster.local:9000}"
export E2E_S3_SECRET="${E2E_S3_SECRET:-s3-credentials}"
export E2E_TRAINER_IMAGE="$TRAINER_IMAGE"
export E2E_LOG_DIR="${E2E_LOG_DIR:-$ROOT/e2e-logs}"
# Kueue for the queued scenario (e2e/kind/kueue.sh): a pinned release, its queues.
export KUEUE_VERSION="${KUEUE_VERSION:-v0.16.4}"
export E2E_KUEUE_QUEUE="${E2E_KUEUE_QUEUE:-research}"
export E2E_KUEUE_CLUSTER_QUEUE="${E2E_KUEUE_CLUSTER_QUEUE:-kuberl-e2e}"
