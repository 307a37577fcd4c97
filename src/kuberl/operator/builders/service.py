"""Service NAME-head (ClusterIP): how workers and the operator's peers reach the Ray head."""

from __future__ import annotations

from typing import Any

from kuberl.operator import names
from kuberl.operator.builders.common import Owner, labels, metadata

GCS_PORT = 6379
CLIENT_PORT = 10001
DASHBOARD_PORT = 8265
STATUS_PORT = 8080
HEAD_PORTS = (("gcs", GCS_PORT), ("client", CLIENT_PORT), ("dashboard", DASHBOARD_PORT), ("status", STATUS_PORT))


def build_head_service(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, names.head_name(owner.name), role="head"),
        "spec": {
            "type": "ClusterIP",
            "selector": labels(owner.name, "head"),
            # Workers must resolve the head while it is still starting.
            "publishNotReadyAddresses": True,
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in HEAD_PORTS],
        },
    }
