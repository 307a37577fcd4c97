"""The sweep's search as pure functions over a durable state: restarts, parallelism, grids, pruning, PBT."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kuberl.api.sweep_types import SweepPhase, TrialState
from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.sweep import search
from kuberl.sweep.pbt import exploit_explore, perturb_value
from kuberl.sweep.search import SweepState

BASE: dict[str, Any] = {
    "apiVersion": "kuberl.io/v1alpha1",
    "kind": "RLSweep",
    "metadata": {"name": "cartpole-lr"},
    "spec": {
        "template": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 60000}},
        "parameters": [
            {"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.003, "log": True},
            {"path": "config.entropyCoeff", "type": "categorical", "values": [0.0, 0.01]},
        ],
        "objective": {"metric": "episodeReturnMean", "goal": "maximize"},
        "search": {"algorithm": "tpe", "seed": 1, "startupTrials": 2},
        "maxTrials": 6,
        "parallelism": 2,
    },
}


def sweep_spec(**changes: Any):
    doc = copy.deepcopy(BASE)
    doc["spec"].update(changes)
    return validate_sweep_document(doc).spec


def run_to_end(spec, state: SweepState, value_of, restart_every: int | None = None) -> SweepState:
    """Drive the search as a runner does: propose, finish each trial with value_of(params); with
    restart_every, serialise the state and rebuild it from JSON after that many proposals (a restart)."""
    proposals = 0
    while search.outcome(spec, state) is None:
        new = search.propose(spec, state, "cartpole-lr")
        proposals += len(new)
        for record in search.active(state):
            search.finish(record, TrialState.SUCCEEDED, value_of(record.params))
        if restart_every and proposals >= restart_every:
            state, proposals = SweepState.model_validate_json(state.model_dump_json()), 0
    return state


def objective(params: dict[str, Any]) -> float:
    return -abs(params["config.lr"] - 0.001) * 1000 - params["config.entropyCoeff"] * 10


@pytest.mark.parametrize("algorithm", ["tpe", "random", "grid"])
def test_the_search_continues_after_a_restart_as_if_uninterrupted(algorithm):
    changes: dict[str, Any] = {"search": {"algorithm": algorithm, "seed": 7, "startupTrials": 2}}
    if algorithm == "grid":
        changes["parameters"] = [{"path": "config.lr", "type": "float", "low": 0.001, "high": 0.003, "step": 0.001},
                                 {"path": "config.entropyCoeff", "type": "categorical", "values": [0.0, 0.01]}]
    spec = sweep_spec(**changes)
    straight = run_to_end(spec, SweepState(), objective)
    restarted = run_to_end(spec, SweepState(), objective, restart_every=1)
    assert [t.params for t in restarted.trials] == [t.params for t in straight.trials]
    assert len(straight.trials) == 6
    assert len({tuple(sorted(t.params.items())) for t in straight.trials}) == 6 or algorithm != "grid"
    assert [t.name for t in straight.trials] == [f"cartpole-lr-t{n:03d}" for n in range(6)]


def test_the_state_is_small_json():
    state = run_to_end(sweep_spec(maxTrials=50, parallelism=4), SweepState(), objective)
    text = state.model_dump_json(by_alias=True)
    assert len(state.trials) == 50 and len(text) < 50 * 400
    assert SweepState.model_validate_json(text) == state


def test_never_more_than_parallelism_trials_at_once():
    spec = sweep_spec(parallelism=3, maxTrials=7)
    state = SweepState()
    assert len(search.propose(spec, state, "s")) == 3
    assert search.propose(spec, state, "s") == []  # all three still running
    search.finish(state.trials[1], TrialState.FAILED, None)
    assert [t.number for t in search.propose(spec, state, "s")] == [3]
    assert len(search.active(state)) == 3


def test_seeds_take_slots_of_parallelism():
    spec = sweep_spec(parallelism=4, seedsPerTrial=2)
    assert len(search.propose(spec, SweepState(), "s")) == 2


def test_a_suspended_sweep_proposes_nothing():
    assert search.propose(sweep_spec(suspend=True), SweepState(), "s") == []


def test_grid_exhaustion_ends_the_sweep_before_max_trials():
    spec = sweep_spec(search={"algorithm": "grid"}, maxTrials=100, parameters=[
        {"path": "config.numEpochs", "type": "int", "low": 2, "high": 4},
        {"path": "config.entropyCoeff", "type": "categorical", "values": [0.0, 0.01]}])
    state = run_to_end(spec, SweepState(), lambda p: float(p["config.numEpochs"]))
    points = [(t.params["config.numEpochs"], t.params["config.entropyCoeff"]) for t in state.trials]
    assert sorted(points) == [(e, c) for e in (2, 3, 4) for c in (0.0, 0.01)]
    assert all(isinstance(e, int) for e, _ in points)
    ended = search.outcome(spec, state)
    assert ended is not None and ended.phase == SweepPhase.SUCCEEDED
    assert search.best(spec, state).params["config.numEpochs"] == 4


def test_minimize_picks_the_smallest_and_a_target_ends_the_sweep():
    spec = sweep_spec(objective={"metric": "episodeReturnMean", "goal": "minimize", "target": 0.5})
    state = SweepState()
    first, second = search.propose(spec, state, "s")
    search.finish(first, TrialState.SUCCEEDED, 3.0)
    assert search.outcome(spec, state) is None
    search.finish(second, TrialState.SUCCEEDED, 0.2)
    ended = search.outcome(spec, state)
    assert ended is not None and ended.reason == "TargetReached" and second.name in ended.message
    assert search.best(spec, state) is second


def test_max_failed_trials_fails_the_sweep_naming_the_trials():
    spec = sweep_spec(maxFailedTrials=1)
    state = SweepState()
    a, b = search.propose(spec, state, "s")
    search.finish(a, TrialState.FAILED, None, "exited 1")
    assert search.outcome(spec, state) is None  # one failure is allowed
    search.finish(b, TrialState.FAILED, None, "exited 1")
    ended = search.outcome(spec, state)
    assert ended.phase == SweepPhase.FAILED and ended.reason == "MaxFailedTrialsExceeded"
    assert "s-t000" in ended.message and "s-t001" in ended.message


def test_intermediate_values_are_taken_where_timesteps_cross_each_interval():
    results = [{"timesteps": t, "episodeReturnMean": float(t)} for t in (400, 900, 1300, 2600, 2700)]
    assert search.intermediate_values(results, "episodeReturnMean", 1000) == [
        [1000.0, 1300.0], [2000.0, 2600.0]]
    nested = [{"timesteps": 1000, "evaluation": {"returnMean": 5.0}}]
    assert search.intermediate_values(nested, "evaluationReturnMean", 1000) == [[1000.0, 5.0]]
    assert search.mean_intermediate([[[1000.0, 1.0], [2000.0, 3.0]], [[1000.0, 3.0]]]) == [[1000.0, 2.0]]


def _curve(scale: float, steps: int) -> list[list[float]]:
    return [[float(k * 1000), scale * k] for k in range(1, steps + 1)]


def test_median_pruning_stops_a_trial_below_the_median_of_finished_ones():
    spec = sweep_spec(parallelism=4, earlyStopping={"algorithm": "median", "interval": 1000, "minSteps": 2000,
                                                    "startupTrials": 2})
    state = SweepState()
    good, fine, poor, lucky = search.propose(spec, state, "s")
    for record, scale in ((good, 10.0), (fine, 8.0)):
        record.intermediate = _curve(scale, 5)
        search.finish(record, TrialState.SUCCEEDED, scale * 5)
    poor.intermediate = _curve(1.0, 1)
    assert not search.should_prune(spec, state, poor.number)  # before minSteps
    poor.intermediate = _curve(1.0, 3)
    lucky.intermediate = _curve(12.0, 3)
    restored = SweepState.model_validate_json(state.model_dump_json())  # after a restart
    assert search.should_prune(spec, restored, poor.number)
    assert not search.should_prune(spec, restored, lucky.number)


def test_median_pruning_compares_trials_whose_values_came_at_steps_of_their_own():
    # The operator records a value whenever it reads a trial's status: a finished trial read at 1,024 and then
    # (after an operator restart) from 18,944, a lagging one at 3,584, 8,704 and 14,336. No step is shared.
    spec = sweep_spec(parallelism=2, earlyStopping={"algorithm": "median", "interval": 512, "startupTrials": 1})
    state = SweepState()
    done, lagging = search.propose(spec, state, "s")
    done.intermediate = [[1024.0, 29.7], [18944.0, 141.6], [23552.0, 156.7], [98304.0, 200.0]]
    search.finish(done, TrialState.SUCCEEDED, 200.0)
    lagging.intermediate = [[3584.0, 5.0], [8704.0, 5.0], [14336.0, 5.0]]
    assert search.should_prune(spec, state, lagging.number)  # 5 against 29.7, the finished trial's value by then
    assert search.held_values(done.intermediate, [512, 1024, 3584, 20000, 99000]) == {1024: 29.7, 3584: 29.7,
                                                                                       20000: 141.6}


def test_successive_halving_keeps_its_rungs_in_the_durable_state():
    spec = sweep_spec(parallelism=6, maxTrials=6, earlyStopping={"algorithm": "asha", "interval": 1000,
                                                                 "minSteps": 1000, "reductionFactor": 3})
    state = SweepState()
    assert len(search.propose(spec, state, "s")) == 6
    verdicts = []
    for number, scale in enumerate((5.0, 9.0, 1.0, 7.0, 2.0, 8.0)):
        state.trials[number].intermediate = _curve(scale, 1)
        verdicts.append(search.should_prune(spec, state, number))
        assert "completed_rung_0" in state.trials[number].pruner_state
        state = SweepState.model_validate_json(state.model_dump_json())  # each decision after a restart
    # At rung 0 only the top third of the values seen so far goes on.
    assert verdicts == [False, False, True, True, True, False]


def test_pbt_bottom_quantile_copies_the_top_with_perturbed_params():
    doc = copy.deepcopy(BASE)
    doc["spec"]["search"] = {"algorithm": "pbt", "seed": 3,
                             "pbt": {"populationSize": 4, "perturbationInterval": 5000, "resampleProbability": 0.0}}
    doc["spec"].pop("maxTrials")
    spec = validate_sweep_document(doc).spec
    params = {n: {"config.lr": 0.001 * (n + 1), "config.entropyCoeff": 0.0} for n in range(4)}
    scores = {0: 10.0, 1: 50.0, 2: 400.0, 3: None}
    steps = exploit_explore(spec, params, scores, round_number=0)
    assert [s.trial for s in steps] == [3]  # a member without a score lags; 1 of 4 is the quantile
    (step,) = steps
    assert step.donor == 2
    lr = step.params["config.lr"]
    assert lr in (pytest.approx(0.003 * 0.8), 0.003)  # 1.2 x 0.003 is past high and clipped to it
    assert step.params["config.entropyCoeff"] == 0.01  # a categorical moves to its neighbour
    assert exploit_explore(spec, params, scores, round_number=0) == steps  # seeded: a restart repeats it


def test_perturbation_stays_in_range_and_moves_ints():
    import random

    doc = copy.deepcopy(BASE)
    doc["spec"]["parameters"] = [{"path": "config.numEpochs", "type": "int", "low": 1, "high": 3}]
    spec = validate_sweep_document(doc).spec
    (parameter,) = spec.parameters
    rng = random.Random(0)
    values = {perturb_value(parameter, 2, rng, 0.0) for _ in range(50)}
    assert values == {1, 3}
    assert {perturb_value(parameter, 3, rng, 1.0) for _ in range(100)} <= {1, 2, 3}
