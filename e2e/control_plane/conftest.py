"""One real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) for the
module's tests. The binaries are required: `make e2e-control-plane` builds them first."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kuberl_testing.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".tools" / "bin" / "kubectl"


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("control-plane")) as plane:
        rss = plane.rss_bytes()["kube-apiserver"] or 0
        print(f"\ncontrol plane up in {plane.bring_up_seconds:.1f} s, kube-apiserver RSS {rss / 2**20:.0f} MiB, "
              f"logs in {plane.work_dir / 'logs'}")
        yield plane


@pytest.fixture(scope="module")
def kubectl(control_plane: ControlPlane) -> Callable[..., str]:
    """kubectl as the admin: its stdout; raises with its stderr when it fails."""
    def run(*args: str, stdin: str | None = None) -> str:
        result = subprocess.run([str(KUBECTL), "--kubeconfig", str(control_plane.kubeconfig), *args], input=stdin,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr}{result.stdout}")
        return result.stdout

    return run
