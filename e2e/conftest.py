"""The e2e harness: one cluster per session, the local stand-in by default or kind (E2E_CLUSTER=kind).

Stand-in: the Kubernetes API emulator, moto's S3 server, the real operator (`kuberl operator`,
pointed at the emulator through a kubeconfig) and the pod runner, all on loopback. Logs of a run
stay under the pytest temp dir (printed at the end of the session).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from experiments import Experiments
from kindcluster import KindCluster
from kubernetes import client as k8s
from kubernetes import config

from kuberl_testing.podrunner import api_client_from_kubeconfig
from kuberl_testing.standin import StandInCluster

CLUSTER = os.environ.get("E2E_CLUSTER", "standin")


def pytest_report_header() -> str:
    return f"e2e cluster: {CLUSTER}"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if CLUSTER == "kind":
        started: Any = KindCluster().start()
    elif CLUSTER == "standin":
        started = StandInCluster(tmp_path_factory.mktemp("standin")).start()
    else:
        raise pytest.UsageError(f"E2E_CLUSTER must be standin or kind, not {CLUSTER!r}")
    try:
        yield started
    finally:
        started.stop()
        if CLUSTER == "standin":
            print(f"\nstand-in logs: {started.work_dir}")


@pytest.fixture(scope="session")
def api(cluster: Any) -> k8s.ApiClient:
    if CLUSTER == "kind":
        config.load_kube_config()
        return k8s.ApiClient()
    return api_client_from_kubeconfig(str(cluster.kubeconfig))


@pytest.fixture()
def experiments(api: k8s.ApiClient, cluster: Any) -> Experiments:
    return Experiments(api, cluster)
