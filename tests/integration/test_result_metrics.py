"""kuberl.api.results against what each algorithm reports: every number of a real result line is a metric a
sweep's objective may name, so the check that refuses misspelt objectives never refuses a real one.

Each algorithm trains 2 iterations of 64 env steps in the learner's process (about 4 s in all on 2 cores)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kuberl.api.algorithms import REGISTRY
from kuberl.api.results import LEARNER_STATS, metric_error
from kuberl.trainer.algorithms.config import config_class_for

CASES = {  # algorithm -> env, hyperparameters that make 2 iterations learn something
    "ppo": ("CartPole-v1", {"numEpochs": 1, "minibatchSize": 32}),
    "dqn": ("CartPole-v1", {"learningStarts": 32, "trainBatchSize": 16}),
    "impala": ("CartPole-v1", {"minIterationSeconds": 0.1, "trainBatchSize": 32}),
    "appo": ("CartPole-v1", {"minIterationSeconds": 0.1, "trainBatchSize": 32}),
    "sac": ("Pendulum-v1", {"learningStarts": 32, "trainBatchSize": 16, "hidden": [16]}),
}


def numbers(result: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in result.items():
        if isinstance(value, dict):
            yield from numbers(value, f"{prefix}{key}.")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield f"{prefix}{key}"


def test_every_algorithm_has_its_learner_statistics_declared():
    assert set(LEARNER_STATS) == set(REGISTRY)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_every_number_a_run_reports_is_a_metric_it_may_name(algorithm):
    env, params = CASES[algorithm]
    config = (config_class_for(algorithm)().environment(env)
              .rollouts(workers=0, envs_per_worker=2, fragment_length=32).debugging(seed=1))
    config.document["spec"]["config"].update(params)
    algo = config.build()
    try:
        reported = {name for _ in range(2) for name in numbers(algo.train())}
    finally:
        algo.stop()
    assert any(name.startswith("learner.") for name in reported)
    refused = {name: metric_error(name, algorithm, evaluation=False, multi_agent=False) for name in sorted(reported)}
    assert {name: why for name, why in refused.items() if why} == {}
