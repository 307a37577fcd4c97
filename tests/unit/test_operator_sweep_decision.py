"""decide_sweep: the RLSweep lifecycle as a pure function of the stored status and the trials' status."""

from __future__ import annotations

import copy
from typing import Any

from kuberl.api.sweep_types import RLSweepStatus, SweepPhase, TrialState
from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.operator.builders.trial import build_trial
from kuberl.operator.sweep_decision import RunObservation, cluster_errors, decide_sweep
from kuberl.sweep.plan import run_names
from kuberl_testing.manifests import random_sweep_document

NOW = "2026-01-01T00:00:00Z"
DOC = random_sweep_document(max_trials=3)
SWEEP_BODY = {"metadata": {"name": "sw", "namespace": "ns", "uid": "u-1"}}


def sweep(**spec: Any):
    doc = copy.deepcopy(DOC)
    doc["spec"].update(spec)
    return validate_sweep_document(doc)


def running(timesteps: int = 0, value: float | None = None, suspended: bool = False) -> RunObservation:
    return RunObservation(phase="Running", timesteps=timesteps, value=value, suspended=suspended)


def test_a_new_sweep_records_trials_before_naming_them_for_creation():
    decision = decide_sweep(sweep(), None, {}, 1, NOW)
    assert [(r.name, k) for r, k in decision.create] == [("sw-t000", 0), ("sw-t001", 0)]
    assert [t.state for t in decision.status.trials] == [TrialState.PENDING] * 2
    assert decision.status.phase == SweepPhase.RUNNING and decision.status.trials_running == 2
    assert decision.status.pbt_round is None  # only a pbt sweep has rounds


def test_recorded_trials_without_runs_are_created_again_and_nothing_new_is_proposed():
    first = decide_sweep(sweep(), None, {}, 1, NOW)
    again = decide_sweep(sweep(), first.status, {}, 1, NOW)  # a restart between the status write and creation
    assert [(r.name, k) for r, k in again.create] == [("sw-t000", 0), ("sw-t001", 0)]
    assert [t.params for t in again.status.trials] == [t.params for t in first.status.trials]


def test_seeds_are_runs_of_one_trial_and_its_value_is_their_mean():
    s = sweep(seedsPerTrial=2, parallelism=2)
    first = decide_sweep(s, None, {}, 1, NOW)
    assert [(r.name, k) for r, k in first.create] == [("sw-t000", 0), ("sw-t000", 1)]
    record = first.status.trials[0]
    assert run_names(s.spec, record) == ["sw-t000-s0", "sw-t000-s1"]
    bodies = [build_trial(SWEEP_BODY, s.spec, record, k) for k in (0, 1)]
    assert [b["spec"]["config"]["seed"] for b in bodies] == [4, 5]
    done = {"sw-t000-s0": RunObservation(phase="Succeeded", value=10.0),
            "sw-t000-s1": RunObservation(phase="Succeeded", value=20.0)}
    later = decide_sweep(s, first.status, done, 1, NOW)
    assert later.status.trials[0].state == TrialState.SUCCEEDED and later.status.trials[0].value == 15.0


def test_a_pruned_trial_stays_suspended_level_based():
    s = sweep(earlyStopping={"algorithm": "median", "interval": 100, "startupTrials": 1})
    status = decide_sweep(s, None, {}, 1, NOW).status
    status = decide_sweep(s, status, {"sw-t000": running(200, 50.0), "sw-t001": running(0)}, 1, NOW).status
    status = decide_sweep(s, status, {"sw-t000": RunObservation(phase="Succeeded", value=60.0),
                                      "sw-t001": running(0)}, 1, NOW).status
    pruned = decide_sweep(s, status, {"sw-t001": running(200, 3.0), "sw-t002": running(0)}, 1, NOW)
    assert pruned.status.trials[1].state == TrialState.PRUNED and pruned.suspend == ["sw-t001"]
    # The suspension did not land (the operator restarted): the next pass asks for it again.
    again = decide_sweep(s, pruned.status, {"sw-t001": running(200, 3.0), "sw-t002": running(0)}, 1, NOW)
    assert again.suspend == ["sw-t001"]
    done = decide_sweep(s, pruned.status, {"sw-t001": running(200, 3.0, suspended=True), "sw-t002": running(0)},
                        1, NOW)
    assert done.suspend == [] and done.resume == []


def test_suspend_and_resume_follow_the_sweep():
    status = decide_sweep(sweep(), None, {}, 1, NOW).status
    runs = {"sw-t000": running(), "sw-t001": running()}
    held = decide_sweep(sweep(suspend=True), status, runs, 2, NOW)
    assert sorted(held.suspend) == ["sw-t000", "sw-t001"] and held.status.phase == SweepPhase.SUSPENDED
    runs = {name: running(suspended=True) for name in runs}
    resumed = decide_sweep(sweep(), held.status, runs, 3, NOW)
    assert sorted(resumed.resume) == ["sw-t000", "sw-t001"] and resumed.status.phase == SweepPhase.RUNNING


def test_a_finished_sweep_creates_nothing_more():
    status = RLSweepStatus(phase=SweepPhase.SUCCEEDED)
    assert decide_sweep(sweep(), status, {}, 1, NOW).create == []


def test_the_operator_refuses_what_only_the_local_runner_does():
    doc = copy.deepcopy(DOC)
    doc["spec"]["objective"] = {"metric": "learner.entropy"}
    doc["spec"]["template"]["storage"] = {}
    errors = cluster_errors(validate_sweep_document(doc))
    assert any(e.startswith("spec.objective.metric:") for e in errors)
    assert any(e.startswith("spec.template.storage.uri:") for e in errors)


def pbt_sweep(**spec: Any):
    doc = copy.deepcopy(DOC)
    doc["spec"].update({"search": {"algorithm": "pbt", "seed": 2, "pbt": {
        "populationSize": 2, "perturbationInterval": 400, "resampleProbability": 0.0}}, "maxTrials": 2}, **spec)
    doc["spec"]["template"]["stop"] = {"timesteps": 1000}
    return validate_sweep_document(doc)


def done(value: float, checkpoint: str) -> RunObservation:
    return RunObservation(phase="Succeeded", value=value, checkpoint=checkpoint)


def test_pbt_trains_the_population_in_rounds_and_a_laggard_takes_the_leaders_checkpoint():
    s = pbt_sweep()
    first = decide_sweep(s, None, {}, 1, NOW)
    assert [(r.name, k) for r, k in first.create] == [("sw-t000", 0), ("sw-t001", 0)]
    bodies = [build_trial(SWEEP_BODY, s.spec, r, k) for r, k in first.create]
    assert [b["metadata"]["name"] for b in bodies] == ["sw-t000-r00", "sw-t001-r00"]
    assert [b["spec"]["stop"]["timesteps"] for b in bodies] == [400, 400]
    assert "restoreFrom" not in bodies[0]["spec"].get("checkpoint", {}) and bodies[0]["metadata"]["labels"]["kuberl.io/pbt-round"] == "0"

    half = decide_sweep(s, first.status, {"sw-t000-r00": done(10.0, "s3://b/r/sw-t000-r00/checkpoints/3"),
                                          "sw-t001-r00": running(300)}, 1, NOW)
    assert half.create == [] and half.status.pbt_round == 0  # the round waits for every member

    leader_params = first.status.trials[1].params
    runs = {"sw-t000-r00": done(10.0, "s3://b/r/sw-t000-r00/checkpoints/3"),
            "sw-t001-r00": done(50.0, "s3://b/r/sw-t001-r00/checkpoints/3")}
    stepped = decide_sweep(s, half.status, runs, 1, NOW)
    assert stepped.status.pbt_round == 1
    laggard, leader = stepped.status.trials
    assert laggard.intermediate == [[400.0, 10.0]] and leader.intermediate == [[400.0, 50.0]]
    assert laggard.restored_from == "s3://b/r/sw-t001-r00/checkpoints/3"
    assert leader.restored_from == "s3://b/r/sw-t001-r00/checkpoints/3"  # its own
    assert leader.params == leader_params
    ratio = laggard.params["config.lr"] / leader_params["config.lr"]
    assert min(abs(ratio - 0.8), abs(ratio - 1.2)) < 1e-9 or laggard.params["config.lr"] in (0.0001, 0.003)
    assert [(r.name, k) for r, k in stepped.create] == [("sw-t000", 1), ("sw-t001", 1)]
    body = build_trial(SWEEP_BODY, s.spec, laggard, 1)
    assert body["metadata"]["name"] == "sw-t000-r01" and body["spec"]["stop"]["timesteps"] == 800
    assert body["spec"]["checkpoint"]["restoreFrom"] == "s3://b/r/sw-t001-r00/checkpoints/3"
    assert body["spec"]["config"]["lr"] == laggard.params["config.lr"]
    assert build_trial(SWEEP_BODY, s.spec, leader, 1)["spec"]["checkpoint"]["restoreFrom"] == \
        "s3://b/r/sw-t001-r00/checkpoints/3"

    again = decide_sweep(s, stepped.status, runs, 1, NOW)  # a restart before the round's runs were created
    assert again.status.pbt_round == 1 and again.status.trials == stepped.status.trials
    assert [(r.name, k) for r, k in again.create] == [("sw-t000", 1), ("sw-t001", 1)]

    runs |= {"sw-t000-r01": done(60.0, "s3://b/r/sw-t000-r01/checkpoints/6"),
             "sw-t001-r01": done(55.0, "s3://b/r/sw-t001-r01/checkpoints/6")}
    third = decide_sweep(s, again.status, runs, 1, NOW)
    assert third.status.pbt_round == 2
    assert third.status.trials[1].restored_from == "s3://b/r/sw-t000-r01/checkpoints/6"  # the lead changed
    assert build_trial(SWEEP_BODY, s.spec, third.status.trials[0], 2)["spec"]["stop"]["timesteps"] == 1000
    runs |= {"sw-t000-r02": done(70.0, "c"), "sw-t001-r02": done(80.0, "d")}
    end = decide_sweep(s, third.status, runs, 1, NOW)
    assert end.status.phase == SweepPhase.SUCCEEDED and end.create == []
    assert end.status.best is not None and end.status.best.name == "sw-t001" and end.status.best.value == 80.0
    assert [t.intermediate[-1] for t in end.status.trials] == [[1000.0, 70.0], [1000.0, 80.0]]


def test_pbt_creates_within_parallelism_and_a_failed_member_leaves_the_population():
    s = pbt_sweep(parallelism=1)
    first = decide_sweep(s, None, {}, 1, NOW)
    assert [(r.name, k) for r, k in first.create] == [("sw-t000", 0)]
    second = decide_sweep(s, first.status, {"sw-t000-r00": running(100)}, 1, NOW)
    assert second.create == []
    third = decide_sweep(s, second.status, {"sw-t000-r00": done(5.0, "a")}, 1, NOW)
    assert [(r.name, k) for r, k in third.create] == [("sw-t001", 0)]
    failed = RunObservation(phase="Failed", message="env broke")
    fourth = decide_sweep(s, third.status, {"sw-t000-r00": done(5.0, "a"), "sw-t001-r00": failed}, 1, NOW)
    assert fourth.status.trials[1].state == TrialState.FAILED and "env broke" in fourth.status.trials[1].message
    assert fourth.status.pbt_round == 1 and fourth.status.trials[0].restored_from == "a"  # alone, it goes on


def test_pbt_with_several_seeds_per_member_is_refused():
    import pytest

    from kuberl.api.field_errors import ManifestError

    with pytest.raises(ManifestError, match="spec.seedsPerTrial"):
        pbt_sweep(seedsPerTrial=2)


def test_pbt_a_member_whose_finished_run_was_deleted_leaves_the_population():
    s = pbt_sweep()
    first = decide_sweep(s, None, {}, 1, NOW)
    half = decide_sweep(s, first.status, {"sw-t000-r00": done(10.0, "a"), "sw-t001-r00": running(100)}, 1, NOW)
    later = decide_sweep(s, half.status, {"sw-t001-r00": done(20.0, "b")}, 1, NOW)  # sw-t000-r00 deleted
    assert later.status.trials[0].state == TrialState.FAILED and "is gone" in later.status.trials[0].message
    assert later.status.pbt_round == 1 and later.status.trials[1].restored_from == "b"
