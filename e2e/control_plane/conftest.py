"""Two kinds of tests on a real control plane (the binaries are required: `make e2e-control-plane`
builds them first):

- `control_plane`: a bare one (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) for
  what only the API server answers (the CRD as stored, admission, subresources, dry runs);
- `cluster`: the e2e control-plane backend (controlplanecluster.py: the chart applied, the operator
  on its ServiceAccount token, the pod runner as the node), shared with the scenarios when
  E2E_CLUSTER=control-plane, for what the operator does against a real server.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from controlplanecluster import ControlPlaneCluster, wait_established
from experiments import Experiments
from kubernetes import client as k8s
from paths import CRD_FILE, CRD_NAME, KUBECTL, NAMESPACE

from kuberl_testing.controlplane import ControlPlane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("control-plane")) as plane:
        rss = plane.rss_bytes()["kube-apiserver"] or 0
        print(f"\ncontrol plane up in {plane.bring_up_seconds:.1f} s, kube-apiserver RSS {rss / 2**20:.0f} MiB, "
              f"logs in {plane.work_dir / 'logs'}")
        yield plane


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Callable[..., str]:
    """kubectl as the admin: its stdout; raises with its stderr when it fails."""
    def run(*args: str, stdin: str | None = None) -> str:
        result = subprocess.run([str(KUBECTL), "--kubeconfig", str(control_plane.kubeconfig), *args], input=stdin,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr}{result.stdout}")
        return result.stdout

    return run


@pytest.fixture(scope="session")
def crd_applied(kubectl: Callable[..., str]) -> dict[str, Any]:
    """The generated CRD applied to the bare control plane, with namespace NAMESPACE; as stored."""
    kubectl("apply", "-f", str(CRD_FILE))
    wait_established(kubectl, [CRD_NAME])
    kubectl("create", "namespace", NAMESPACE)
    return json.loads(kubectl("get", "crd", CRD_NAME, "-o", "json"))


# -- the backend with the operator (overrides e2e/conftest.py's, which follow E2E_CLUSTER) --

@pytest.fixture(scope="session")
def cluster(real_control_plane: ControlPlaneCluster) -> ControlPlaneCluster:
    return real_control_plane


@pytest.fixture(scope="session")
def api(cluster: ControlPlaneCluster) -> k8s.ApiClient:
    return cluster.api_client


@pytest.fixture()
def experiments(api: k8s.ApiClient, cluster: ControlPlaneCluster) -> Experiments:
    return Experiments(api, cluster)
