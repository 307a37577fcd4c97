"""`config.annealLr`: the learning rate falls linearly to (almost) 0 over `stop.timesteps`, for PPO and, on the
learner that runs beside sampling, IMPALA and APPO."""

from __future__ import annotations

import pytest

from kuberl.api.validation import validate_document
from kuberl.trainer.algorithms.config import AlgorithmConfig

BASE_LR = 0.01
BUDGET = 4_096


def _build(algorithm: str, config: dict, stop: dict):
    extra = {} if algorithm == "ppo" else {"minIterationSeconds": 0.1}
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "anneal"},
           "spec": {"algorithm": algorithm, "env": {"id": "CartPole-v1"},
                    "config": {"seed": 1, "lr": BASE_LR, **extra, **config},
                    "rollouts": {"workers": 0, "envsPerWorker": 4, "fragmentLength": 16}, "stop": stop}}
    return AlgorithmConfig.from_experiment(validate_document(doc)).build()


def _lr(algo) -> float:
    return algo.learner.optimizer.param_groups[0]["lr"]


@pytest.mark.parametrize("algorithm", ["ppo", "impala", "appo"])
def test_the_rate_falls_with_the_share_of_the_budget_sampled(algorithm):
    algo = _build(algorithm, {"annealLr": True}, {"timesteps": BUDGET})
    try:
        seen = []
        while algo.timesteps < BUDGET // 2:
            before = algo.timesteps
            algo.train()
            # PPO sets the rate for the batch it just sampled, IMPALA and APPO for the iteration about to run.
            lr = _lr(algo)
            assert BASE_LR * (1 - algo.timesteps / BUDGET) - 1e-12 <= lr <= BASE_LR * (1 - before / BUDGET) + 1e-12
            seen.append(lr)
        assert seen == sorted(seen, reverse=True)
        algo.train()  # begun (IMPALA, APPO) or sampled (PPO) past half the budget: at most half the rate
        assert _lr(algo) <= BASE_LR * 0.5 + 1e-12
    finally:
        algo.stop()


def test_without_it_or_without_a_step_budget_the_rate_stays():
    algo = _build("appo", {"annealLr": False}, {"timesteps": BUDGET})
    try:
        algo.train()
        algo.train()
        assert _lr(algo) == BASE_LR
    finally:
        algo.stop()
    with pytest.warns(RuntimeWarning, match="spec.config.annealLr needs spec.stop.timesteps"):
        algo = _build("impala", {"annealLr": True}, {"iterations": 2})
    try:
        algo.train()
        assert _lr(algo) == BASE_LR
    finally:
        algo.stop()


@pytest.mark.parametrize("algorithm", ["ppo", "appo"])
def test_ppo_and_appo_anneal_by_default_and_say_nothing_where_there_is_no_step_budget(algorithm, recwarn):
    algo = _build(algorithm, {}, {"timesteps": BUDGET})
    try:
        while algo.timesteps < BUDGET // 2:
            algo.train()
        algo.train()
        assert _lr(algo) <= BASE_LR * 0.5 + 1e-12
    finally:
        algo.stop()
    algo = _build(algorithm, {}, {"iterations": 2})
    try:
        algo.train()
        assert _lr(algo) == BASE_LR
    finally:
        algo.stop()
    assert not [w for w in recwarn if "annealLr" in str(w.message)]
