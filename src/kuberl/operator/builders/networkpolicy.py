"""NetworkPolicy: Ray has no authorisation of its own beyond the token, so only the experiment's own
pods reach its ports; the trainer's status/metrics port also admits the operator and Prometheus."""

from __future__ import annotations

from typing import Any

from kuberl.api.contract import EXPERIMENT_LABEL
from kuberl.operator import names
from kuberl.operator.builders.common import Owner, metadata

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def build_network_policy(owner: Owner, *, operator_namespace: str, prometheus_namespace: str,
                         status_port: int) -> dict[str, Any]:
    own_pods = {"podSelector": {"matchLabels": {EXPERIMENT_LABEL: names.experiment_label(owner.name)}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(owner, names.network_policy_name(owner.name)),
        "spec": {
            "podSelector": {"matchLabels": {EXPERIMENT_LABEL: names.experiment_label(owner.name)}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own_pods]},
                {
                    "from": [
                        {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}}},
                        {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: prometheus_namespace}}},
                    ],
                    "ports": [{"protocol": "TCP", "port": status_port}],
                },
            ],
        },
    }
