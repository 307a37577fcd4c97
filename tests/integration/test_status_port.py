"""The operator's KUBERL_STATUS_PORT moves the trainer's status port everywhere, with real pods.

On the stand-in cluster (API emulator, pod runner, moto's S3, the real operator) the operator runs
with KUBERL_STATUS_PORT=9191. The pod runner keeps that port's number locally and does not pin
any other: a head whose trainer listened elsewhere would never be read, and the experiment would
stay Starting, without progress, until its summary. A worker waits for the head's status port
through the Service, so a Service without the port would keep the run from starting at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from kuberl.api.contract import ENV_STATUS_PORT, EXPERIMENT_LABEL
from kuberl.api.types import API_VERSION, GROUP, KIND, PLURAL, VERSION
from kuberl_testing.operator_harness import wait_for
from kuberl_testing.podrunner import api_client_from_kubeconfig
from kuberl_testing.standin import StandInCluster

PORT = 9191
NAME = "moved-port"

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandInCluster]:
    started = StandInCluster(tmp_path_factory.mktemp("standin-9191"), status_port=PORT).start()
    try:
        yield started
    finally:
        started.stop()


def _wait(what: str, check: Callable[[], Any], cluster: StandInCluster, timeout: float = 300.0) -> Any:
    try:
        return wait_for(check, timeout=timeout, interval=0.2, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(cluster.namespace)}") from None


def test_progress_is_read_from_the_moved_port(cluster: StandInCluster) -> None:
    api = api_client_from_kubeconfig(str(cluster.kubeconfig))
    custom, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    ns = cluster.namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": NAME, "namespace": ns},
        "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"},
                 "config": {"numEpochs": 1, "minibatchSize": 128},
                 "rollouts": {"workers": 1, "envsPerWorker": 4, "fragmentLength": 64},
                 "stop": {"timesteps": 25600},
                 "checkpoint": {"everyIterations": 20},
                 "storage": {"uri": cluster.storage_uri, "endpoint": cluster.s3_endpoint,
                             "secretRef": {"name": cluster.s3_secret}},
                 "image": cluster.trainer_image, "workers": {"replicas": 1}}})

    def status() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME).get("status") or {}

    seen: list[tuple[int, int]] = []  # (iteration, timesteps) while Running: read from /status, not the summary

    def progress_advanced() -> bool:
        current = status()
        assert current.get("phase") != "Failed", current
        if current.get("phase") == "Running" and current.get("iteration"):
            seen.append((current["iteration"], current["timesteps"]))
        return len({iteration for iteration, _ in seen}) >= 2 or current.get("phase") == "Succeeded"

    _wait("progress while Running", progress_advanced, cluster)
    assert len({iteration for iteration, _ in seen}) >= 2, f"no progress read while Running: {seen} {status()}"
    assert seen[-1][1] > seen[0][1]

    selector = f"{EXPERIMENT_LABEL}={NAME}"
    head = next(p for p in core.list_namespaced_pod(ns, label_selector=selector).items if p.metadata.name.endswith("-head"))
    container = head.spec.containers[0]
    assert {p.name: p.container_port for p in container.ports}["status"] == PORT
    assert {e.name: e.value for e in container.env}[ENV_STATUS_PORT] == str(PORT)
    service = core.list_namespaced_service(ns, label_selector=selector).items[0]
    assert {p.name: p.port for p in service.spec.ports}["status"] == PORT
    policy = k8s.NetworkingV1Api(api).list_namespaced_network_policy(ns, label_selector=selector).items[0]
    assert [p.port for rule in policy.spec.ingress for p in (rule.ports or [])] == [PORT]

    final = _wait("Succeeded", lambda: (s := status()).get("phase") in ("Succeeded", "Failed") and s, cluster)
    assert final["phase"] == "Succeeded", final
    assert final["timesteps"] >= 25600 and final["iteration"] >= seen[-1][0]
