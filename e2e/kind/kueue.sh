#!/usr/bin/env bash
# Install a pinned Kueue release with its `pod` integration on, and the queue the queued scenario uses:
# a ClusterQueue that holds (stopPolicy: Hold) until the scenario releases it, and LocalQueue
# $E2E_KUEUE_QUEUE in the experiments' namespace. Pods without the queue-name label are not Kueue's
# (manageJobsWithoutQueueName stays false), so the operator, MinIO and the other scenarios are untouched.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

manifests="$(mktemp)"
curl -fsSL -o "$manifests" "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
python3 e2e/kind/kueue_pod_integration.py "$manifests"
kubectl apply --server-side -f "$manifests"
kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
# The webhook answers only once its certificate is in place: retry the first queue objects until it does.
for attempt in $(seq 1 30); do
  if kubectl apply --server-side -f - <<YAML
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: kuberl-e2e}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: $E2E_KUEUE_CLUSTER_QUEUE}
spec:
  namespaceSelector: {}
  stopPolicy: Hold
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: kuberl-e2e
      resources:
      - {name: cpu, nominalQuota: "8"}
      - {name: memory, nominalQuota: 16Gi}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: $E2E_KUEUE_QUEUE, namespace: $E2E_NAMESPACE}
spec: {clusterQueue: $E2E_KUEUE_CLUSTER_QUEUE}
YAML
  then exit 0; fi
  echo "Kueue's webhook is not ready yet ($attempt)"; sleep 5
done
exit 1
