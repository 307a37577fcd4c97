"""One builder for the small RLExperiment manifests the tests train: a CartPole run in one process
unless told otherwise, with any other spec sections given as plain dicts."""

from __future__ import annotations

from typing import Any

import yaml

from kuberl.api.types import API_VERSION


def experiment_manifest(
    name: str,
    *,
    algorithm: str = "ppo",
    env: str = "CartPole-v1",
    seed: int = 3,
    config: dict[str, Any] | None = None,
    rollouts: dict[str, Any] | None = None,
    **spec: Any,
) -> str:
    """The manifest's YAML; `spec` adds sections such as stop, checkpoint, storage, tracking, evaluation."""
    body = {
        "apiVersion": API_VERSION,
        "kind": "RLExperiment",
        "metadata": {"name": name},
        "spec": {
            "algorithm": algorithm,
            "env": {"id": env},
            "config": {"seed": seed, **(config or {})},
            "rollouts": rollouts or {"workers": 0, "envsPerWorker": 4, "fragmentLength": 32},
            **spec,
        },
    }
    return yaml.safe_dump(body, sort_keys=False)


def experiment_yaml(name: str, spec: str) -> str:
    """A hand-written manifest's YAML: `spec` is the spec's lines, indented two spaces. The header has no braces,
    so the result can still be a `str.format` template (`name` may hold a field such as `pixels-{algorithm}`)."""
    return f"apiVersion: {API_VERSION}\nkind: RLExperiment\nmetadata:\n  name: {name}\nspec:\n{spec}"


def random_sweep_document(max_trials: int) -> dict[str, Any]:
    """A small RLSweep of CartPole PPO: random search over config.lr, two trials at a time."""
    return {
        "apiVersion": API_VERSION, "kind": "RLSweep", "metadata": {"name": "sw"},
        "spec": {"template": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 1000},
                              "config": {"seed": 4}, "storage": {"uri": "s3://bucket/runs"}},
                 "parameters": [{"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.003}],
                 "search": {"algorithm": "random", "seed": 1}, "maxTrials": max_trials, "parallelism": 2},
    }
