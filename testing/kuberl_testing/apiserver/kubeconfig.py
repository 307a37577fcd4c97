"""A kubeconfig that points clients (kubectl, the kubernetes client, Kopf) at the emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def kubeconfig(url: str) -> dict[str, Any]:
    """A kubeconfig for the emulator (no authentication: it only listens on loopback)."""
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "kuberl-emulator",
        "clusters": [{"name": "kuberl-emulator", "cluster": {"server": url}}],
        "users": [{"name": "kuberl-emulator", "user": {"token": "emulator"}}],
        "contexts": [{"name": "kuberl-emulator",
                      "context": {"cluster": "kuberl-emulator", "user": "kuberl-emulator", "namespace": "default"}}],
    }


def write_kubeconfig(path: str | Path, url: str) -> Path:
    path = Path(path)
    path.write_text(yaml.safe_dump(kubeconfig(url)))
    return path
