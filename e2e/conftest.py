"""The e2e harness: one cluster per session, chosen by E2E_CLUSTER: the local stand-in (default),
the real control plane (`control-plane`) or kind (`kind`).

Stand-in: the Kubernetes API emulator, moto's S3 server, the real operator (`kuberl operator`,
pointed at the emulator through a kubeconfig) and the pod runner, all on loopback. Control plane:
the same operator and pod runner around a real kube-apiserver 1.20 (see controlplanecluster.py).
Logs of a run stay under the pytest temp dir (printed at the end of the session).

A scenario that needs an API feature some backends lack says so with
`@pytest.mark.requires_feature("podSchedulingGates")`: it runs where the server has it and is
skipped, with the reason, where it has not (see capabilities.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from capabilities import missing_feature
from controlplanecluster import ControlPlaneCluster
from experiments import Experiments
from kindcluster import KindCluster
from kubernetes import client as k8s
from kubernetes import config

from kuberl_testing.podrunner import api_client_from_kubeconfig
from kuberl_testing.standin import StandInCluster

CLUSTER = os.environ.get("E2E_CLUSTER", "standin")
BACKENDS = ("standin", "control-plane", "kind")


def pytest_report_header() -> str:
    return f"e2e cluster: {CLUSTER}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires_feature(name): needs an API feature not every backend's server has")
    config.addinivalue_line("markers", "backend_agnostic(why): nothing the scenario checks depends on the API server; "
                                       "not run on the real control plane (make e2e runs it on the stand-in)")


# Scenarios whose every check is the trainer's or the operator's own logic, on objects and calls that other
# scenarios already take through the real control plane (the same head and worker pods, Events, RBAC): running
# them there again cost CI minutes and proved nothing more. Each says why with its marker; they still run on the
# stand-in (make e2e) and on kind.
AGNOSTIC_SKIPPED_ON = ("control-plane",)
_AGNOSTIC = pytest.StashKey[list]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if CLUSTER not in AGNOSTIC_SKIPPED_ON:
        return
    agnostic = [item for item in items if item.get_closest_marker("backend_agnostic")]
    if agnostic:
        config.hook.pytest_deselected(items=agnostic)
        items[:] = [item for item in items if item not in agnostic]
        config.stash[_AGNOSTIC] = [item.nodeid for item in agnostic]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    deselected = config.stash.get(_AGNOSTIC, [])
    if deselected:
        terminalreporter.write_line(f"not run on the {CLUSTER} backend, backend-agnostic (they run in make e2e): "
                                    + ", ".join(deselected))


def _start(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    if kind == "kind":
        return KindCluster().start()
    if kind == "standin":
        return StandInCluster(tmp_path_factory.mktemp("standin")).start()
    if kind == "control-plane":
        return ControlPlaneCluster(tmp_path_factory.mktemp("control-plane-cluster")).start()
    raise pytest.UsageError(f"E2E_CLUSTER must be one of {', '.join(BACKENDS)}, not {kind!r}")


@pytest.fixture(scope="session")
def real_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneCluster]:
    """The control-plane backend, started once per session whoever asks first (the scenarios with
    E2E_CLUSTER=control-plane, or e2e/control_plane/'s tests that need the operator)."""
    started = _start("control-plane", tmp_path_factory)
    try:
        yield started
        # The chart's RBAC must cover everything the operator did in the whole session.
        forbidden = started.forbidden_requests(started.operator_user)
    finally:
        started.stop()
    assert not forbidden, f"the operator's ServiceAccount was refused by RBAC: {forbidden[:10]}"


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if CLUSTER == "control-plane":
        yield request.getfixturevalue("real_control_plane")
        return
    started = _start(CLUSTER, tmp_path_factory)
    try:
        yield started
    finally:
        started.stop()
        if CLUSTER == "standin":
            print(f"\nstand-in logs: {started.work_dir}")


@pytest.fixture(autouse=True)
def _feature_gate(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("requires_feature")
    if marker is None:
        return
    reason = missing_feature(request.getfixturevalue("cluster"), request.getfixturevalue("api"), marker.args[0])
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def api(cluster: Any) -> k8s.ApiClient:
    if CLUSTER == "kind":
        config.load_kube_config()
        return k8s.ApiClient()
    return api_client_from_kubeconfig(str(cluster.kubeconfig))


@pytest.fixture()
def experiments(api: k8s.ApiClient, cluster: Any) -> Experiments:
    return Experiments(api, cluster)
