"""A sweep's view of its trials' RLExperiments (their typed status) and the events it posts (the operator's Event)."""

from __future__ import annotations

import copy

from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.api.types import Phase
from kuberl.operator.status.decision import Event
from kuberl.operator.sweep_decision import RunObservation, decide_sweep, observe_run
from kuberl_testing.manifests import random_sweep_document

NOW = "2026-01-01T00:00:00Z"
DOC = random_sweep_document(max_trials=2)


def test_a_trial_s_phase_is_read_as_a_phase_and_one_the_operator_does_not_know_is_none() -> None:
    body = {"spec": {"suspend": True}, "status": {"phase": "Succeeded", "timesteps": 1000, "episodeReturnMean": 21.5,
                                                  "lastCheckpoint": "s3://b/r/checkpoints/1", "message": "done"}}
    seen = observe_run(body, "episodeReturnMean")
    assert seen.phase is Phase.SUCCEEDED
    assert (seen.suspended, seen.timesteps, seen.value, seen.checkpoint, seen.message) == (
        True, 1000, 21.5, "s3://b/r/checkpoints/1", "done")
    assert observe_run({"status": {"phase": "Finished", "timesteps": 5}}, "episodeReturnMean") == RunObservation(
        timesteps=5)
    assert observe_run({}, "episodeReturnMean") == RunObservation()


def test_the_events_a_sweep_posts_are_the_operator_s_events() -> None:
    sweep = validate_sweep_document(copy.deepcopy(DOC))
    status = decide_sweep(sweep, None, {}, 1, NOW).status
    failed = observe_run({"status": {"phase": "Failed", "message": "OOMKilled"}}, "episodeReturnMean")
    decision = decide_sweep(sweep, status, {"sw-t000": failed, "sw-t001": RunObservation(phase=Phase.RUNNING)}, 1, NOW)
    assert decision.events and all(isinstance(event, Event) for event in decision.events)
    assert Event("Warning", "TrialFailed", "trial sw-t000: OOMKilled") in decision.events
