"""The malloc settings reach a local Ray node's processes through the environment they inherit, and the
pods through the operator: one table (MALLOC_ENV) for both; a value the user set is kept."""

from __future__ import annotations

import os

from kuberl.api.contract import MALLOC_ENV
from kuberl.trainer.distributed.ray_runtime import _node_environment


def test_the_settings_are_present_while_the_node_starts_and_gone_after(monkeypatch) -> None:
    for name in MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    with _node_environment(MALLOC_ENV):
        assert {name: os.environ[name] for name in MALLOC_ENV} == MALLOC_ENV
    assert not set(MALLOC_ENV) & set(os.environ)


def test_a_value_the_user_set_wins_and_stays(monkeypatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    with _node_environment(MALLOC_ENV):
        assert os.environ["MALLOC_ARENA_MAX"] == "4"
    assert os.environ["MALLOC_ARENA_MAX"] == "4"


def test_the_head_and_worker_pods_carry_them() -> None:
    from kuberl.api.validation import validate_document
    from kuberl.operator.builders import Owner, build_head_pod, build_worker_pod

    spec = {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 1000},
            "storage": {"uri": "s3://bucket/runs"}, "workers": {"replicas": 1}}
    experiment = validate_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                    "metadata": {"name": "malloc"}, "spec": spec})
    owner = Owner("malloc", "research", "uid-1")
    for pod in (build_head_pod(experiment, owner, 1, status_port=8080),
                build_worker_pod(experiment, owner, 0, 1, status_port=8080)):
        env = {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c["env"]}
        assert {name: env.get(name) for name in MALLOC_ENV} == MALLOC_ENV
