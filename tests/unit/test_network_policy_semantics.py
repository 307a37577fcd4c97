"""The experiment's NetworkPolicy, evaluated as Kubernetes evaluates it: who may reach which port.

Ray has no authorisation of its own beyond the token, so the Ray ports (GCS, client, dashboard, and
the random worker ports Ray opens) must admit only the experiment's own pods, in its own namespace;
the trainer's status/metrics port also admits the operator's and Prometheus's namespaces.
"""

from __future__ import annotations

from typing import Any

import pytest

from kuberl.api.validation import validate_document
from kuberl.operator.builders import (
    Owner,
    build_head_pod,
    build_network_policy,
    build_worker_pod,
    resolve_experiment,
)
from kuberl.operator.builders.service import CLIENT_PORT, DASHBOARD_PORT, GCS_PORT
from kuberl.operator.settings import Settings

NS = "research"
SETTINGS = Settings(operator_namespace="kuberl-system", prometheus_namespace="monitoring")
STATUS_PORT = SETTINGS.status_port
RAY_PORTS = (GCS_PORT, CLIENT_PORT, DASHBOARD_PORT, 10002, 20000, 65000)  # and random worker ports
NAMESPACE_LABELS = {ns: {"kubernetes.io/metadata.name": ns} for ns in (NS, "kuberl-system", "monitoring", "other")}


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "extend the evaluator for matchExpressions"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def admits(policy: dict[str, Any], target: dict[str, str], source: dict[str, str], source_ns: str, port: int) -> bool:
    """Whether ingress from a pod (labels, namespace) to a target pod on a TCP port is allowed."""
    spec = policy["spec"]
    if not _matches(spec["podSelector"], target) or "Ingress" not in spec["policyTypes"]:
        return True  # not isolated by this policy
    for rule in spec.get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == "TCP" and p["port"] == port for p in ports):
            continue
        peers = rule.get("from")
        if not peers:
            return True
        for peer in peers:
            pod_ok = "podSelector" not in peer or _matches(peer["podSelector"], source)
            if "namespaceSelector" in peer:
                ns_ok = _matches(peer["namespaceSelector"], NAMESPACE_LABELS[source_ns])
            else:
                ns_ok = source_ns == policy["metadata"]["namespace"]
            if pod_ok and ns_ok:
                return True
    return False


def experiment_pods(name: str, status_port: int = STATUS_PORT) -> tuple[dict[str, Any], list[dict[str, str]]]:
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": name},
           "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 10},
                    "storage": {"uri": "s3://bucket/runs"}, "workers": {"replicas": 2}}}
    experiment = resolve_experiment(validate_document(doc), SETTINGS, NS)
    owner = Owner(name, NS, f"uid-{name}")
    pods = [build_head_pod(experiment, owner, 1, status_port=status_port),
            *(build_worker_pod(experiment, owner, i, 1, status_port=status_port) for i in range(2))]
    policy = build_network_policy(owner, operator_namespace="kuberl-system", prometheus_namespace="monitoring",
                                  status_port=status_port)
    return policy, [p["metadata"]["labels"] for p in pods]


POLICY, OWN = experiment_pods("cartpole")
_, NEIGHBOUR = experiment_pods("cartpole-2")  # same namespace, a name sharing the prefix


def test_the_policy_covers_every_pod_of_the_experiment():
    assert POLICY["metadata"]["namespace"] == NS
    assert all(_matches(POLICY["spec"]["podSelector"], labels) for labels in OWN)
    assert not any(_matches(POLICY["spec"]["podSelector"], labels) for labels in NEIGHBOUR)


@pytest.mark.parametrize("port", [*RAY_PORTS, STATUS_PORT])
def test_own_pods_reach_every_port(port):
    assert all(admits(POLICY, target, source, NS, port) for target in OWN for source in OWN)


@pytest.mark.parametrize("port", RAY_PORTS)
@pytest.mark.parametrize(("source", "source_ns"), [
    (NEIGHBOUR[0], NS),  # another experiment's head, same namespace
    ({"app": "notebook"}, NS),  # anything else in the namespace
    ({}, "kuberl-system"),  # the operator
    ({}, "monitoring"),  # Prometheus
    (OWN[0], "other"),  # the same labels, from another namespace
], ids=["other-experiment", "same-namespace", "operator", "prometheus", "copied-labels-elsewhere"])
def test_ray_ports_are_closed_to_everyone_else(port, source, source_ns):
    assert not any(admits(POLICY, target, source, source_ns, port) for target in OWN)


def test_the_status_port_admits_the_operator_and_prometheus_only():
    for source_ns, allowed in (("kuberl-system", True), ("monitoring", True), ("other", False), (NS, False)):
        assert admits(POLICY, OWN[0], {"app": "x"}, source_ns, STATUS_PORT) is allowed, source_ns
    assert not admits(POLICY, OWN[0], NEIGHBOUR[0], NS, STATUS_PORT)


def test_a_moved_status_port_is_the_one_open_to_the_operator():
    policy, own = experiment_pods("moved", status_port=9191)
    assert admits(policy, own[0], {}, "kuberl-system", 9191)
    assert admits(policy, own[0], {}, "monitoring", 9191)
    assert not admits(policy, own[0], {}, "kuberl-system", 8080)
    assert admits(policy, own[0], own[1], NS, 9191)
