"""The chart rendered by the real helm (from .tools, installed by `make tools` when missing)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".tools" / "bin" / "helm"
RELEASE_NAMESPACE = "kuberl-system"


def render(*sets: str) -> list[dict[str, Any]]:
    """`helm template` of charts/kuberl into RELEASE_NAMESPACE with `--set` for each of `sets`."""
    if not HELM.exists():
        subprocess.run(["make", "tools"], cwd=ROOT, check=True, capture_output=True, timeout=600)
    args = [a for s in sets for a in ("--set", s)]
    proc = subprocess.run([str(HELM), "template", "kuberl", "charts/kuberl", "-n", RELEASE_NAMESPACE, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(proc.stdout) if d]
