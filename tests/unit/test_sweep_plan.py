"""One sweep model: the operator (decide_sweep, build_trial) and `kuberl sweep` (run_manifests, step_round) plan
the same trials, run names, seeds, rounds and run specs from the same spec; PBT members get a seed of their own
for each round, recorded in the sweep's status."""

from __future__ import annotations

import copy
from typing import Any

from kuberl.api.defaults import resolved_defaults, spec_fields_set
from kuberl.api.sweep_types import TrialState
from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.api.validation import validate_document
from kuberl.operator.builders.common import resolve_experiment
from kuberl.operator.builders.trial import build_trial
from kuberl.operator.settings import Settings
from kuberl.operator.sweep_decision import RunObservation, decide_sweep
from kuberl.sweep import plan, search
from kuberl.sweep.local import run_manifests
from kuberl.sweep.pbt import step_round
from kuberl.sweep.search import SweepState

NOW = "2026-01-01T00:00:00Z"
SWEEP_BODY = {"metadata": {"name": "sw", "namespace": "ns", "uid": "u-1"}}
POPULATION, INTERVAL, BUDGET = 3, 400, 1000  # rounds end at 400, 800 and 1000 steps
# The members' value in each round: the lead changes hands, so laggards take different donors.
VALUES = [[10.0, 50.0, 30.0], [60.0, 20.0, 40.0], [70.0, 80.0, 75.0]]


def pbt_sweep(template_config: dict[str, Any] | None = None, algorithm: str = "ppo"):
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": "sw"},
           "spec": {"template": {"algorithm": algorithm, "env": {"id": "CartPole-v1"}, "stop": {"timesteps": BUDGET},
                                 "config": {"seed": 4, **(template_config or {})},
                                 "storage": {"uri": "s3://bucket/runs"}},
                    "parameters": [{"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.003, "log": True},
                                   {"path": "config.gamma", "type": "float", "low": 0.95, "high": 0.999}],
                    "search": {"algorithm": "pbt", "seed": 2, "pbt": {
                        "populationSize": POPULATION, "perturbationInterval": INTERVAL, "quantileFraction": 0.34,
                        "resampleProbability": 0.25}},
                    "parallelism": POPULATION}}
    return validate_sweep_document(doc)


def checkpoint(name: str, round_number: int) -> str:
    return f"s3://bucket/runs/ns/{name}-r{round_number:02d}/checkpoints/{round_number + 1}"


def _comparable(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    spec.pop("storage", None)  # the local sweep keeps every run under its own directory
    return {"name": name, **spec}


def operator_rounds(s) -> tuple[list[list[dict[str, Any]]], Any]:
    """Every round's runs as the operator creates them, each round's run succeeding with VALUES."""
    status, runs, planned = None, {}, []
    for round_number, values in enumerate(VALUES):
        decision = decide_sweep(s, status, runs, 1, NOW)
        assert decision.status.pbt_round == round_number
        bodies = [build_trial(SWEEP_BODY, s.spec, record, k) for record, k in decision.create]
        planned.append([_comparable(b["metadata"]["name"], b["spec"]) for b in bodies])
        status = decision.status
        for record, value in zip(status.trials, values, strict=True):
            name = plan.segment_name(record.name, round_number)
            runs[name] = RunObservation(phase="Succeeded", value=value, checkpoint=checkpoint(record.name, round_number))
    final = decide_sweep(s, status, runs, 1, NOW)
    return planned, final.status


def local_rounds(s) -> tuple[list[list[dict[str, Any]]], SweepState]:
    """Every round's runs as `kuberl sweep` starts them, after the same values."""
    state = SweepState()
    search.propose(s.spec, state, s.name)
    planned = []
    for round_number, values in enumerate(VALUES):
        assert state.pbt_round == round_number
        planned.append([_comparable(m["metadata"]["name"], m["spec"])
                        for record in search.active(state) for m in run_manifests(s.spec, record, state.pbt_round)])
        for record, value in zip(state.trials, values, strict=True):
            plan.record_round(record, plan.round_end(s.spec, round_number), value)
        if round_number + 1 < plan.rounds(s.spec):
            step_round(s.spec, state, {t.number: checkpoint(t.name, round_number) for t in state.trials})
    return planned, state


def test_the_operator_and_the_local_sweep_plan_the_same_pbt_runs():
    s = pbt_sweep()
    by_operator, status = operator_rounds(s)
    by_local, state = local_rounds(s)
    assert by_operator == by_local
    assert [[run["name"] for run in runs] for runs in by_local] == [
        [f"sw-t{n:03d}-r{r:02d}" for n in range(POPULATION)] for r in range(3)]
    assert [{run["stop"]["timesteps"] for run in runs} for runs in by_local] == [{400}, {800}, {1000}]
    # Someone lagged and took another's checkpoint and perturbed values: the step is not a no-op here.
    sources = [run["checkpoint"]["restoreFrom"] for run in by_local[1]]
    assert sources != [checkpoint(f"sw-t{n:03d}", 0) for n in range(POPULATION)]
    assert [t.params for t in status.trials] == [t.params for t in state.trials]
    assert [t.seeds for t in status.trials] == [t.seeds for t in state.trials]
    assert [t.intermediate for t in status.trials] == [t.intermediate for t in state.trials]
    assert status.pbt_round == state.pbt_round == 2


def test_the_operator_and_the_local_sweep_plan_the_same_seeded_trials():
    doc = pbt_sweep().to_manifest()
    doc["spec"]["search"] = {"algorithm": "random", "seed": 3}
    doc["spec"].update(maxTrials=2, seedsPerTrial=2, parallelism=4)
    s = validate_sweep_document(doc)
    decision = decide_sweep(s, None, {}, 1, NOW)
    by_operator = [_comparable(b["metadata"]["name"], b["spec"])
                   for b in (build_trial(SWEEP_BODY, s.spec, record, k) for record, k in decision.create)]
    state = SweepState()
    search.propose(s.spec, state, s.name)
    by_local = [_comparable(m["metadata"]["name"], m["spec"]) for t in state.trials for m in run_manifests(s.spec, t)]
    assert by_operator == by_local
    assert [(run["name"], run["config"]["seed"]) for run in by_local] == [
        ("sw-t000-s0", 4), ("sw-t000-s1", 5), ("sw-t001-s0", 4), ("sw-t001-s1", 5)]
    assert all("annealTimesteps" not in run["config"] and run["stop"]["timesteps"] == BUDGET for run in by_local)
    assert [t.seeds for t in decision.status.trials] == [[4, 5], [4, 5]]


def test_pbt_seeds_differ_across_members_and_rounds_and_the_status_records_them():
    planned, status = operator_rounds(pbt_sweep())
    seeds = [[run["config"]["seed"] for run in runs] for runs in planned]
    flat = [seed for row in seeds for seed in row]
    assert len(set(flat)) == len(flat) == POPULATION * 3  # every member, every round: its own
    assert all(0 <= seed < 2**31 for seed in flat)
    # Each member's record lists its seed of every round so far.
    assert [t.seeds for t in status.trials] == [[seeds[r][n] for r in range(3)] for n in range(POPULATION)]
    # Derived from the template's seed, the member and the round: the same again, other with another seed.
    assert operator_rounds(pbt_sweep())[0] == planned
    other = operator_rounds(pbt_sweep({"seed": 5}))[0]
    assert not {run["config"]["seed"] for runs in other for run in runs} & set(flat)


def test_a_pbt_member_anneals_over_the_sweeps_budget_unless_the_template_says_otherwise():
    s = pbt_sweep()
    record = search.propose(s.spec, SweepState(), s.name)[0]
    assert [plan.run_spec(s.spec, record, r)["config"]["annealTimesteps"] for r in range(3)] == [BUDGET] * 3
    own = pbt_sweep({"annealTimesteps": 5000})
    assert plan.run_spec(own.spec, record, 1)["config"]["annealTimesteps"] == 5000
    dqn = pbt_sweep(algorithm="dqn")  # no learning-rate schedule: nothing to set
    assert "annealTimesteps" not in plan.run_spec(dqn.spec, record, 1)["config"]


def test_a_member_without_a_checkpoint_leaves_the_population_before_the_step():
    s = pbt_sweep()
    state = SweepState()
    search.propose(s.spec, state, s.name)
    for record, value in zip(state.trials, VALUES[0], strict=True):
        plan.record_round(record, INTERVAL, value)
    search.finish(state.trials[1], TrialState.FAILED, None, "no checkpoint")
    steps = step_round(s.spec, state, {0: checkpoint("sw-t000", 0), 2: checkpoint("sw-t002", 0)})
    assert state.pbt_round == 1 and state.trials[1].state == TrialState.FAILED
    assert all(step.donor != 1 and step.trial != 1 for step in steps)
    assert [len(t.seeds) for t in state.trials] == [2, 1, 2]


def test_a_trial_is_defaulted_as_its_template_run_alone():
    """What the template leaves unset stays unset in its trials: SAC's continuous-control defaults (a 1M
    uniform buffer, one env) and the operator's pod sizes apply to a trial as to the template's own run, both
    as `kuberl sweep` and as the operator make it."""
    template = {"algorithm": "sac", "env": {"id": "Pendulum-v1"}, "stop": {"timesteps": 20000},
                "storage": {"uri": "s3://bucket/runs"}}
    parameters = [{"path": "config.lr", "type": "float", "low": 1e-4, "high": 1e-3}]
    spec = {"template": template, "search": {"algorithm": "random", "seed": 1}, "parameters": parameters}
    s = validate_sweep_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep",
                                 "metadata": {"name": "sw"}, "spec": spec})
    record = search.propose(s.spec, SweepState(), s.name)[0]
    alone = validate_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                               "metadata": {"name": "a"},
                               "spec": {**template, "config": {"lr": record.params["config.lr"]}}})
    expected = resolved_defaults(alone, "continuous-vector")[1]
    assert expected["replay.capacity"] == 1_000_000 and expected["replay.prioritized"] is False
    by_local = validate_document(run_manifests(s.spec, record)[0])
    by_operator = validate_document(build_trial(SWEEP_BODY, s.spec, record))
    settings = Settings(default_head_cpu="7", default_worker_memory="9Gi")
    for trial in (by_local, by_operator):
        assert resolved_defaults(trial, "continuous-vector")[1] == expected
        assert spec_fields_set(trial) == spec_fields_set(alone) == ""  # the operator's annotation
        resolved = resolve_experiment(trial, settings, "ns")
        assert (resolved.spec.head.cpu, resolved.spec.workers.memory) == ("7", "9Gi")
