"""Where the control plane's binaries are, in the manner of controller-runtime's KUBEBUILDER_ASSETS.

KUBERL_CONTROL_PLANE_BIN names a folder holding etcd and kube-apiserver (and, for the controllers
and scheduling, kube-controller-manager and kube-scheduler); without it, the folder `make
control-plane` fills: ${KUBERL_CONTROL_PLANE_CACHE:-~/.cache/kuberl/k8s-1.20.2}/bin.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

BIN_VARIABLE = "KUBERL_CONTROL_PLANE_BIN"
CACHE_VARIABLE = "KUBERL_CONTROL_PLANE_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "kuberl" / "k8s-1.20.2"
REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kube-controller-manager", "kube-scheduler")


class MissingBinaries(RuntimeError):
    """The folder lacks a binary the control plane needs."""


def binaries_dir() -> Path:
    if os.environ.get(BIN_VARIABLE):
        return Path(os.environ[BIN_VARIABLE])
    return Path(os.environ.get(CACHE_VARIABLE) or DEFAULT_CACHE) / "bin"


def find_binaries(directory: Path | None = None) -> dict[str, Path]:
    """Name to path for every binary present; raises MissingBinaries when etcd or kube-apiserver is
    not there, saying how to get them."""
    directory = directory or binaries_dir()
    found = {name: directory / name for name in REQUIRED + OPTIONAL
             if (directory / name).is_file() and os.access(directory / name, os.X_OK)}
    missing = [name for name in REQUIRED if name not in found]
    if missing:
        raise MissingBinaries(f"{', '.join(missing)} not found in {directory}: run `make control-plane`, "
                              f"or set {BIN_VARIABLE} to a folder that has them")
    return found


@functools.cache
def _help_text(binary: Path) -> str:
    result = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    return result.stdout + result.stderr


def supports_flag(binary: Path, flag: str) -> bool:
    """Whether `binary --help` lists `flag` (insecure-port flags went away in later releases)."""
    return f"{flag} " in _help_text(binary) or f"{flag}=" in _help_text(binary)
