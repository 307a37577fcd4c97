"""`config.annealLr`: the learning rate falls linearly to (almost) 0 over `config.annealTimesteps` (default
`stop.timesteps`), for PPO and, on the learner that runs beside sampling, IMPALA and APPO; a PBT member's over the
sweep's whole budget, across its rounds."""

from __future__ import annotations

import pytest

from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.api.validation import validate_document
from kuberl.sweep import plan, search
from kuberl.sweep.search import SweepState
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.learning.schedules import anneal_horizon, annealed_lr
from kuberl.trainer.run.restore_from import restore_from

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


def test_anneal_timesteps_sets_the_horizon_apart_from_the_runs_budget():
    algo = _build("ppo", {"annealLr": True, "annealTimesteps": 2 * BUDGET}, {"timesteps": BUDGET})
    try:
        while algo.timesteps < BUDGET:
            before = algo.timesteps
            algo.train()
            lr = _lr(algo)
            assert BASE_LR * (1 - algo.timesteps / (2 * BUDGET)) - 1e-12 <= lr <= BASE_LR * (1 - before / (2 * BUDGET))
        assert _lr(algo) > BASE_LR * 0.45  # at its own budget's end the rate is about halfway, not at 0
    finally:
        algo.stop()


def _pbt_sweep(rounds: int, interval: int):
    return validate_sweep_document({
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": "pop"},
        "spec": {"template": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "config": {"lr": BASE_LR},
                              "stop": {"timesteps": rounds * interval}},
                 "parameters": [{"path": "config.gamma", "type": "float", "low": 0.9, "high": 0.99}],
                 "search": {"algorithm": "pbt", "seed": 1, "pbt": {"populationSize": 2,
                                                                   "perturbationInterval": interval}}}})


def test_a_pbt_members_rate_falls_once_over_all_its_rounds():
    """The schedule as each round's run computes it: its stop.timesteps is the round's end, its counter goes on
    from the checkpoint it restored (the previous round's end), its horizon is the sweep's budget."""
    rounds, interval = 4, 1000
    sweep = _pbt_sweep(rounds, interval)
    record = search.propose(sweep.spec, SweepState(), sweep.name)[0]
    rates = []
    for r in range(rounds):
        spec = plan.run_spec(sweep.spec, record, r)
        horizon = anneal_horizon(spec["config"].get("annealTimesteps"), spec["stop"]["timesteps"])
        rates += [annealed_lr(BASE_LR, t, horizon) for t in range(r * interval, spec["stop"]["timesteps"], 100)]
    assert rates == sorted(rates, reverse=True) and len(set(rates)) == len(rates)  # one decay, no saw
    assert rates[0] == BASE_LR and rates[-1] == pytest.approx(BASE_LR * 100 / (rounds * interval))


def test_a_run_restored_at_a_rounds_end_goes_on_down_the_same_schedule(tmp_path):
    """Two rounds of one member, trained for real: the second restores the first's checkpoint."""
    horizon = 2 * BUDGET
    first = _build("ppo", {"annealLr": True, "annealTimesteps": horizon}, {"timesteps": BUDGET})
    try:
        while first.timesteps < BUDGET:
            first.train()
        end_of_first = _lr(first)
        first.save(f"file://{tmp_path}/r00")
    finally:
        first.stop()
    second = _build("ppo", {"annealLr": True, "annealTimesteps": horizon}, {"timesteps": horizon})
    try:
        restore_from(second, f"file://{tmp_path}/r00")
        second.train()
        assert _lr(second) < end_of_first  # on down from where the first round left it, not back to the top
        assert _lr(second) == pytest.approx(BASE_LR * (1 - second.timesteps / horizon))
    finally:
        second.stop()
