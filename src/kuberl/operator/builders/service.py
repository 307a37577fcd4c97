"""Service NAME-head (ClusterIP): how workers and the operator's peers reach the Ray head."""

from __future__ import annotations

from typing import Any

from kuberl.api.contract import HEAD_ROLE
from kuberl.operator import names
from kuberl.operator.builders.common import Owner, labels, metadata

GCS_PORT = 6379
CLIENT_PORT = 10001
DASHBOARD_PORT = 8265


def head_ports(status_port: int) -> tuple[tuple[str, int], ...]:
    """(name, port) of every port the head serves; the trainer's status port is the operator's setting."""
    return (("gcs", GCS_PORT), ("client", CLIENT_PORT), ("dashboard", DASHBOARD_PORT), ("status", status_port))


def build_head_service(owner: Owner, *, status_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, names.head_name(owner.name), role=HEAD_ROLE),
        "spec": {
            "type": "ClusterIP",
            "selector": labels(owner.name, HEAD_ROLE),
            # Workers must resolve the head while it is still starting.
            "publishNotReadyAddresses": True,
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in head_ports(status_port)],
        },
    }
