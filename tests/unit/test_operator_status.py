"""status.decide: every lifecycle branch, from observations to status, conditions, actions and events."""

from __future__ import annotations

import datetime

from kuberl.api.types import Phase, RLExperimentStatus
from kuberl.operator.status import (
    Observation,
    PodState,
    changed_fields,
    decide,
    pod_state,
    refused_changes,
    set_condition,
    status_of,
    with_mutable_fields,
)

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def obs(**kw) -> Observation:
    kw.setdefault("generation", 1)
    kw.setdefault("now", NOW)
    previous = kw.pop("previous", {})  # as the API server holds it, or a decision's status
    kw["previous"] = previous if isinstance(previous, RLExperimentStatus) else status_of(previous)
    return Observation(**kw)


def head(phase="Running", attempt=1, **kw) -> PodState:
    return PodState(name="e-head", role="head", attempt=attempt, phase=phase, **kw)


def worker(i, phase="Running", attempt=1, **kw) -> PodState:
    return PodState(name=f"e-worker-{i}", role="worker", attempt=attempt, phase=phase, index=i, **kw)


def cond(status, type_):
    return next(c for c in status.conditions if c.type == type_)


def test_new_experiment_creates_the_head_and_workers():
    d = decide(obs(replicas=2))
    assert d.create_head == 1 and d.create_workers == [0, 1] and d.worker_attempt == 1
    assert d.ensure_children and not d.delete_pods
    assert d.status.phase == "Pending" and d.status.attempt == 1
    assert d.status.start_time == "2026-01-01T12:00:00Z"
    assert cond(d.status, "Reconciling").status == "True"
    assert cond(d.status, "Ready").status == "False"
    assert cond(d.status, "Succeeded").status == "Unknown"
    assert all(c.observed_generation == 1 for c in d.status.conditions)
    assert [e.reason for e in d.events] == ["HeadCreated"]  # it says the phase too: one event, not two
    assert d.events[0].message == "attempt 1; pods pending"


def test_running_with_all_workers_is_ready_and_copies_trainer_progress():
    trainer = {"phase": "Running", "attempt": 1, "iteration": 7, "timesteps": 700, "episodeReturnMean": 21.5,
               "lastCheckpoint": "s3://b/p/ns/e/checkpoints/000005"}
    d = decide(obs(replicas=2, pods=(head(), worker(0), worker(1)), trainer=trainer,
                   previous={"phase": "Starting", "attempt": 1}))
    assert d.status.phase == "Running" and d.status.workers == 2
    assert cond(d.status, "Ready").status == "True" and cond(d.status, "Ready").reason == "Training"
    assert cond(d.status, "Reconciling").status == "False"
    assert d.status.iteration == 7 and d.status.timesteps == 700
    assert d.status.last_checkpoint.endswith("000005")
    assert d.status.evaluation_return_mean is None  # no evaluation yet
    assert not d.acts


def test_the_trainers_evaluation_return_reaches_the_status_while_running_and_at_the_end():
    trainer = {"phase": "Running", "attempt": 1, "iteration": 8, "timesteps": 800, "episodeReturnMean": 30.0,
               "evaluationReturnMean": 55.5}
    d = decide(obs(replicas=0, pods=(head(),), trainer=trainer, previous={"phase": "Running", "attempt": 1}))
    assert d.status.evaluation_return_mean == 55.5
    summary = {"result": "Succeeded", "message": "done", "iteration": 9, "evaluationReturnMean": 61.25}
    done = head(phase="Succeeded", exit_code=0, termination=summary)
    d = decide(obs(replicas=0, pods=(done,), previous={"phase": "Running", "attempt": 1,
                                                         "evaluationReturnMean": 55.5}))
    assert d.status.phase == "Succeeded" and d.status.evaluation_return_mean == 61.25


def test_running_waits_for_the_trainer_then_for_workers():
    d = decide(obs(replicas=1, pods=(head(), worker(0, "Pending")), previous={"phase": "Pending", "attempt": 1}))
    assert d.status.phase == "Starting" and cond(d.status, "Ready").reason == "WaitingForTrainer"
    d = decide(obs(replicas=1, pods=(head(), worker(0, "Pending")), trainer={"phase": "Running", "attempt": 1},
                   previous={"phase": "Starting", "attempt": 1}))
    assert d.status.phase == "Running" and cond(d.status, "Ready").status == "False"
    assert cond(d.status, "Ready").reason == "WaitingForWorkers"
    assert cond(d.status, "Reconciling").status == "True"


def test_trainer_status_of_another_attempt_is_ignored():
    d = decide(obs(pods=(head(attempt=2),), trainer={"phase": "Running", "attempt": 1, "iteration": 99},
                   previous={"phase": "Starting", "attempt": 2}))
    assert d.status.iteration is None and d.status.phase == "Starting"


def test_last_transition_time_changes_only_with_status():
    earlier = NOW - datetime.timedelta(minutes=5)
    conds = set_condition([], "Ready", "False", "Starting", "", 1, earlier)
    same = set_condition(conds, "Ready", "False", "Other", "msg", 2, NOW)
    assert same[0].last_transition_time == "2026-01-01T11:55:00Z" and same[0].observed_generation == 2
    flipped = set_condition(same, "Ready", "True", "Training", "", 2, NOW)
    assert flipped[0].last_transition_time == "2026-01-01T12:00:00Z"


def test_lost_worker_is_recreated():
    previous = {"phase": "Running", "attempt": 1}
    d = decide(obs(replicas=2, pods=(head(), worker(0)), previous=previous))
    assert d.create_workers == [1] and d.worker_attempt == 1 and d.create_head is None
    assert "WorkerRecreated" in [e.reason for e in d.events]
    failed = decide(obs(replicas=2, pods=(head(), worker(0), worker(1, "Failed")), previous=previous))
    assert failed.delete_pods == ["e-worker-1"] and failed.create_workers == []
    assert failed.requeue_after is not None and failed.acts


def test_scaling_up_and_down():
    previous = {"phase": "Running", "attempt": 1}
    up = decide(obs(replicas=3, pods=(head(), worker(0)), previous=previous))
    assert up.create_workers == [1, 2]
    down = decide(obs(replicas=1, pods=(head(), worker(0), worker(1), worker(2)), previous=previous))
    assert sorted(down.delete_pods) == ["e-worker-1", "e-worker-2"] and not down.create_workers
    assert down.status.workers == 1


def test_workers_of_an_older_attempt_are_replaced():
    d = decide(obs(replicas=1, pods=(head(attempt=2), worker(0, attempt=1)), previous={"phase": "Running",
                                                                                       "attempt": 2}))
    assert d.delete_pods == ["e-worker-0"]


def test_exit_0_without_a_summary_is_a_head_failure_not_success():
    d = decide(obs(replicas=1, backoff_limit=2, pods=(head("Succeeded", exit_code=0, termination=None), worker(0)),
                   previous={"phase": "Running", "attempt": 1}))
    assert d.status.phase != "Succeeded" and d.restarts == 1 and d.failed_attempt == 1
    assert "without its summary" in d.status.message


def test_a_child_the_api_server_refuses_fails_fast():
    d = decide(obs(replicas=1, create_rejected="Pod 'e-head' refused by the API server (422): bad field"))
    assert d.status.phase == "Failed" and not d.create_head and not d.create_workers
    assert cond(d.status, "Stalled").reason == "CreateRejected"
    assert d.events[0].type == "Warning" and "422" in d.events[0].message


def test_head_succeeded_records_the_summary_and_deletes_workers():
    summary = {"result": "Succeeded", "reason": "StopCriterion", "message": "timesteps reached", "iteration": 12,
               "timesteps": 1200, "episodeReturnMean": 480.0, "lastCheckpoint": "s3://b/x/checkpoints/000012"}
    d = decide(obs(replicas=1, pods=(head("Succeeded", exit_code=0, termination=summary), worker(0)),
                   previous={"phase": "Running", "attempt": 1}))
    assert d.status.phase == "Succeeded" and d.status.completion_time == "2026-01-01T12:00:00Z"
    assert d.status.iteration == 12 and d.status.episode_return_mean == 480.0
    assert d.status.message == "timesteps reached"
    assert d.delete_pods == ["e-worker-0"]
    assert cond(d.status, "Succeeded").status == "True" and cond(d.status, "Stalled").status == "False"
    assert d.events[0].reason == "Succeeded" and d.events[0].type == "Normal"


def test_head_failure_is_recorded_then_retried_with_the_next_attempt():
    previous = {"phase": "Running", "attempt": 1}
    first = decide(obs(backoff_limit=2, pods=(head("Failed", exit_code=1, termination_text="boom"),),
                       previous=previous))
    assert first.delete_pods == ["e-head"] and first.create_head is None
    assert first.restarts == 1 and first.failed_attempt == 1
    assert first.status.phase == "Starting" and "HeadFailed" in [e.reason for e in first.events]
    second = decide(obs(backoff_limit=2, previous=first.status, restarts=1, failed_attempt=1))
    assert second.create_head == 2 and second.status.attempt == 2 and second.restarts == 1


def test_a_lost_head_counts_as_a_failure_even_after_an_operator_crash():
    # The head vanished (or the operator crashed after deleting it but before recording the failure).
    d = decide(obs(previous={"phase": "Running", "attempt": 3}, restarts=1, failed_attempt=2))
    assert d.create_head is None and d.restarts == 2 and d.failed_attempt == 3


def test_backoff_limit_fails_the_experiment_and_keeps_the_head_for_logs():
    d = decide(obs(backoff_limit=1, replicas=1, pods=(head("Failed", attempt=2, exit_code=1), worker(0, attempt=2)),
                   previous={"phase": "Running", "attempt": 2}, restarts=1, failed_attempt=1))
    assert d.status.phase == "Failed" and d.delete_pods == ["e-worker-0"]
    assert cond(d.status, "Stalled").reason == "BackoffLimitExceeded"
    assert cond(d.status, "Succeeded").status == "False"
    assert d.events[0].type == "Warning"


def test_exit_code_2_is_invalid_spec_and_never_retried():
    term = {"result": "InvalidSpec", "reason": "InvalidSpec", "message": "spec.env.id: unknown env 'Nope-v0'"}
    d = decide(obs(pods=(head("Failed", exit_code=2, termination=term),), previous={"phase": "Starting",
                                                                                     "attempt": 1}))
    assert d.status.phase == "Failed" and cond(d.status, "Stalled").reason == "InvalidSpec"
    assert "spec.env.id" in d.status.message and d.create_head is None and d.restarts == 0


def test_invalid_spec_fails_without_pods_or_children():
    d = decide(obs(spec_errors=("spec.replay.shards: apex-dqn needs at least 1 replay shard",)))
    assert d.status.phase == "Failed" and not d.ensure_children and d.create_head is None
    assert cond(d.status, "Stalled").status == "True" and cond(d.status, "Stalled").reason == "InvalidSpec"
    assert cond(d.status, "Succeeded").status == "False"
    assert d.events[0].type == "Warning" and "spec.replay.shards" in d.events[0].message
    again = decide(obs(spec_errors=("spec.replay.shards: x",), previous=d.status))
    assert again.events == [] and not again.acts  # no retry loop, no repeated events


def test_fixing_an_invalid_spec_starts_the_experiment():
    failed = decide(obs(spec_errors=("spec.stop: set one",))).status
    d = decide(obs(generation=2, previous=failed))
    assert d.create_head == 1 and d.status.phase == "Pending" and d.status.completion_time is None


def test_missing_secret_and_image_pull_fail_fast():
    d = decide(obs(missing_secret="spec.storage.secretRef: Secret 's3' not found in namespace 'ns'"))
    assert d.status.phase == "Failed" and cond(d.status, "Stalled").reason == "SecretNotFound"
    assert d.create_head is None
    pulling = head("Pending", waiting_reason="ImagePullBackOff", waiting_message="not found", image="bad:1")
    d = decide(obs(pods=(pulling,), previous={"phase": "Pending", "attempt": 1}))
    assert d.status.phase == "Failed" and cond(d.status, "Stalled").reason == "ImagePullFailed"
    assert "bad:1" in d.status.message and d.delete_pods == ["e-head"]


def test_suspend_deletes_pods_and_resume_starts_the_next_attempt():
    d = decide(obs(suspend=True, replicas=1, pods=(head(), worker(0)), previous={"phase": "Running", "attempt": 1}))
    assert sorted(d.delete_pods) == ["e-head", "e-worker-0"] and d.status.phase == "Suspended"
    assert cond(d.status, "Stalled").status == "False" and cond(d.status, "Reconciling").status == "False"
    resumed = decide(obs(replicas=1, previous=d.status))
    assert resumed.create_head == 2 and resumed.restarts == 0  # resuming is not a failure
    assert "resumes from the last checkpoint" in resumed.events[-1].message


def test_ttl_after_finished_deletes_pods_later():
    done = {"phase": "Succeeded", "attempt": 1, "completionTime": "2026-01-01T11:59:00Z", "conditions": []}
    early = decide(obs(ttl_seconds=120, pods=(head("Succeeded"),), previous=done))
    assert early.delete_pods == [] and early.requeue_after == 60
    late = decide(obs(ttl_seconds=30, pods=(head("Succeeded"),), previous=done))
    assert late.delete_pods == ["e-head"] and late.status.phase == "Succeeded"
    kept = decide(obs(pods=(head("Succeeded"),), previous=done))
    assert kept.delete_pods == [] and kept.requeue_after is None


def test_finished_experiment_stays_finished_on_spec_changes():
    done = {"phase": "Succeeded", "attempt": 1, "completionTime": "2026-01-01T11:59:00Z",
            "conditions": [{"type": "Succeeded", "status": "True", "observedGeneration": 1}]}
    d = decide(obs(generation=2, replicas=3, previous=done))
    assert d.create_head is None and not d.create_workers and d.status.phase == "Succeeded"
    assert d.status.observed_generation == 2 and d.status.conditions[0].observed_generation == 2


def test_refused_change_is_reported_in_a_condition_and_not_applied():
    d = decide(obs(generation=2, replicas=1, refused_changes=("spec.algorithm",), pods=(head(), worker(0)),
                   previous={"phase": "Running", "attempt": 1}))
    stalled = cond(d.status, "Stalled")
    assert stalled.status == "True" and stalled.reason == "SpecChangeRefused"
    assert "spec.algorithm" in stalled.message and stalled.observed_generation == 2
    assert d.use_running_spec and not d.delete_pods and d.create_head is None
    assert [e.reason for e in d.events] == ["SpecChangeRefused"]
    again = decide(obs(generation=2, replicas=1, refused_changes=("spec.algorithm",), pods=(head(), worker(0)),
                       previous=d.status))
    assert again.events == []


def test_changed_and_refused_fields():
    running = {"algorithm": "ppo", "workers": {"replicas": 1, "cpu": "4"}, "suspend": False}
    desired = {"algorithm": "dqn", "workers": {"replicas": 3, "cpu": "4"}, "suspend": True}
    assert changed_fields(running, desired) == ["algorithm", "suspend", "workers.replicas"]
    assert refused_changes(running, desired) == ("spec.algorithm",)
    assert refused_changes(None, desired) == ()
    merged = with_mutable_fields(running, desired)
    assert merged == {"algorithm": "ppo", "workers": {"replicas": 3, "cpu": "4"}, "suspend": True}


def test_idempotent_after_the_pods_exist():
    first = decide(obs(replicas=1))
    pods = (head("Pending", attempt=1), worker(0, "Pending", attempt=1))
    second = decide(obs(replicas=1, pods=pods, previous=first.status))
    assert not second.acts and second.status.attempt == 1
    # An operator that crashed after creating the head but before writing the status sees the same.
    crashed = decide(obs(replicas=1, pods=pods, previous={}))
    assert not crashed.acts and crashed.status.attempt == 1


def test_pod_state_reads_a_pod_body():
    body = {
        "metadata": {"name": "e-worker-3", "labels": {"kuberl.io/role": "worker"},
                     "annotations": {"kuberl.io/attempt": "2"}},
        "spec": {"containers": [{"image": "img:1"}]},
        "status": {"phase": "Failed", "podIP": "10.0.0.3", "containerStatuses": [{"state": {"terminated": {
            "exitCode": 2, "message": '{"result": "InvalidSpec", "message": "bad"}'}}}]},
    }
    state = pod_state(body)
    assert (state.role, state.index, state.attempt, state.phase, state.exit_code) == ("worker", 3, 2, "Failed", 2)
    assert state.termination == {"result": "InvalidSpec", "message": "bad"} and state.ip == "10.0.0.3"
    waiting = pod_state({"metadata": {"name": "e-head", "labels": {"kuberl.io/role": "head"}},
                         "status": {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}})
    assert waiting.waiting_reason == "ErrImagePull" and waiting.phase == "Pending" and waiting.termination is None


def test_long_messages_are_capped():
    d = decide(obs(spec_errors=("spec.env.id: " + "x" * 5000,)))
    assert len(d.status.message) <= 1024 and d.status.message.endswith("...")
    assert all(len(c.message) <= 1024 for c in d.status.conditions)


def test_fixing_a_spec_the_trainer_refused_replaces_its_failed_head():
    term = {"result": "InvalidSpec", "message": "spec.env.id: unknown"}
    failed = decide(obs(pods=(head("Failed", exit_code=2, termination=term),),
                        previous={"phase": "Starting", "attempt": 1})).status
    fixed = decide(obs(generation=2, pods=(head("Failed", exit_code=2, termination=term),), previous=failed))
    assert fixed.delete_pods == ["e-head"] and fixed.status.phase == "Pending"
    assert fixed.failed_attempt == 1 and fixed.restarts == 0
    after = decide(obs(generation=2, previous=fixed.status, failed_attempt=fixed.failed_attempt))
    assert after.create_head == 2 and after.restarts == 0


QUOTA = 'pods "e-head" is forbidden: exceeded quota: no-pods, requested: pods=1, used: pods=0, limited: pods=0'


def test_a_quota_that_refuses_the_head_waits_pending_saying_why_once():
    d = decide(obs(replicas=1, quota_exceeded=QUOTA))
    assert d.quota_wait and d.create_head is None and not d.create_workers and not d.ensure_children
    assert d.status.phase == "Pending" and d.status.message == QUOTA
    reconciling = cond(d.status, "Reconciling")
    assert (reconciling.status, reconciling.reason, reconciling.message) == ("True", "QuotaExceeded", QUOTA)
    assert [(e.type, e.reason, e.message) for e in d.events] == [("Warning", "QuotaExceeded", f"Pending: {QUOTA}")]

    again = decide(obs(replicas=1, quota_exceeded=QUOTA, previous=d.status))
    assert again.quota_wait and again.events == []  # still waiting: said once, not at every retry
    assert again.status.conditions == d.status.conditions  # lastTransitionTime kept


def test_a_quota_that_refuses_a_worker_keeps_a_running_experiment_running():
    d = decide(obs(replicas=2, pods=(head(), worker(0)), quota_exceeded=QUOTA,
                   previous={"phase": "Running", "attempt": 1}))
    assert d.quota_wait and d.status.phase == "Running" and not d.delete_pods
    assert cond(d.status, "Ready").status == "False" and cond(d.status, "Reconciling").reason == "QuotaExceeded"


def test_a_tracking_problem_sets_tracking_degraded_with_one_warning_and_clears_when_logging_again():
    problem = "MLflow at http://mlflow:5000 did not answer: connection refused"
    running = {"phase": "Running", "attempt": 1, "iteration": 3, "timesteps": 300, "trackingProblem": problem}
    d = decide(obs(replicas=0, pods=(head(),), trainer=running, previous={"phase": "Running", "attempt": 1}))
    assert d.status.phase == "Running" and cond(d.status, "Ready").status == "True"  # training goes on
    degraded = cond(d.status, "TrackingDegraded")
    assert (degraded.status, degraded.reason, degraded.message) == ("True", "TrackingUnavailable", problem)
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "TrackingUnavailable")]
    assert problem in d.events[0].message

    again = decide(obs(replicas=0, pods=(head(),), trainer=running, previous=d.status))
    assert cond(again.status, "TrackingDegraded").status == "True" and not again.events  # warned once

    logging = {**running, "trackingProblem": None}
    healed = decide(obs(replicas=0, pods=(head(),), trainer=logging, previous=again.status))
    assert (cond(healed.status, "TrackingDegraded").status, cond(healed.status, "TrackingDegraded").reason) \
        == ("False", "TrackingLogging")
    assert not healed.events


def test_no_tracking_condition_for_a_run_that_never_had_a_tracking_problem():
    running = {"phase": "Running", "attempt": 1, "iteration": 3, "timesteps": 300}
    d = decide(obs(replicas=0, pods=(head(),), trainer=running, previous={"phase": "Running", "attempt": 1}))
    assert all(c.type != "TrackingDegraded" for c in d.status.conditions)


def test_the_typed_status_is_written_as_the_same_camel_case_json():
    trainer = {"phase": "Running", "attempt": 1, "iteration": 7, "timesteps": 700, "episodeReturnMean": 21.5,
               "lastCheckpoint": "s3://b/p/ns/e/checkpoints/000005"}
    d = decide(obs(replicas=1, pods=(head(), worker(0)), trainer=trainer,
                   previous={"phase": "Running", "attempt": 1, "startTime": "2026-01-01T11:00:00Z"}))
    conditions = [{"type": t, "status": s, "reason": "Training", "message": m, "lastTransitionTime": "2026-01-01T12:00:00Z",
                   "observedGeneration": 1}
                  for t, s, m in [("Ready", "True", "attempt 1: 1/1 workers ready"),
                                  ("Succeeded", "Unknown", "attempt 1: 1/1 workers ready"),
                                  ("Reconciling", "False", "attempt 1: 1/1 workers ready"), ("Stalled", "False", "")]]
    assert d.status.to_manifest() == {
        "phase": "Running", "observedGeneration": 1, "conditions": conditions, "attempt": 1, "workers": 1,
        "iteration": 7, "timesteps": 700, "episodeReturnMean": 21.5,
        "lastCheckpoint": "s3://b/p/ns/e/checkpoints/000005", "message": "attempt 1: 1/1 workers ready",
        "startTime": "2026-01-01T11:00:00Z"}
    assert type(d.status.to_manifest()["phase"]) is str


def test_a_stored_status_is_read_typed_leaving_out_what_the_operator_does_not_write():
    stored = {"phase": "Running", "attempt": 2, "someFutureField": 1, "workers": "two",
              "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 3}]}
    status = status_of(stored)
    assert status.phase is Phase.RUNNING and status.attempt == 2 and status.workers is None
    assert status.conditions[0].type == "Ready" and status.conditions[0].observed_generation == 3
    assert status_of({"phase": "Paused", "attempt": 1}).phase is None  # a phase of another version: decided afresh
    assert status_of(None) == status_of({}) == RLExperimentStatus()


def test_a_trainer_value_of_the_wrong_type_is_skipped_not_fatal():
    trainer = {"phase": "Running", "attempt": 1, "iteration": "seven", "timesteps": 700}
    d = decide(obs(pods=(head(),), trainer=trainer, previous={"phase": "Running", "attempt": 1, "iteration": 6}))
    assert d.status.iteration == 6 and d.status.timesteps == 700 and d.status.phase == "Running"


SECRET_GONE = "spec.storage.secretRef: Secret 's3' not found in namespace 'ns'"


def test_a_secret_gone_while_running_keeps_the_pods_and_new_pods_wait_for_it():
    """A Secret rotated or re-created under a running experiment: nothing is deleted for it, a pod that must be
    (re)created waits with the reason said once, and the experiment goes on once the Secret is back."""
    running = {"phase": "Running", "attempt": 1}
    trainer = {"phase": "Running", "attempt": 1}
    d = decide(obs(replicas=1, pods=(head(), worker(0)), trainer=trainer, missing_secret=SECRET_GONE,
                   previous=running))
    assert d.status.phase == "Running" and not d.delete_pods and not d.events
    lost = decide(obs(replicas=1, pods=(head(),), trainer=trainer, missing_secret=SECRET_GONE, previous=running))
    assert lost.status.phase == "Running" and not lost.create_workers and not lost.delete_pods
    assert cond(lost.status, "Ready").reason == "SecretNotFound" and "'s3'" in lost.status.message
    assert [(e.type, e.reason) for e in lost.events] == [("Warning", "SecretNotFound")]
    again = decide(obs(replicas=1, pods=(head(),), trainer=trainer, missing_secret=SECRET_GONE,
                       previous=lost.status))
    assert again.events == [] and not again.create_workers  # still waiting, said once
    back = decide(obs(replicas=1, pods=(head(),), trainer=trainer, previous=again.status))
    assert back.create_workers == [0] and back.status.phase == "Running"


def test_a_head_failure_while_the_secret_is_gone_is_counted_then_the_next_attempt_waits_for_it():
    failed = decide(obs(pods=(head("Failed", exit_code=1),), missing_secret=SECRET_GONE,
                        previous={"phase": "Running", "attempt": 1}))
    assert failed.delete_pods == ["e-head"] and failed.restarts == 1 and failed.failed_attempt == 1
    waiting = decide(obs(missing_secret=SECRET_GONE, previous=failed.status, restarts=1, failed_attempt=1))
    assert waiting.create_head is None and waiting.status.attempt == 1 and waiting.status.phase == "Starting"
    assert waiting.restarts == 1 and waiting.status.last_failure.attempt == 1
    resumed = decide(obs(previous=waiting.status, restarts=1, failed_attempt=1))
    assert resumed.create_head == 2 and resumed.restarts == 1


def test_a_pull_error_of_the_image_the_experiment_already_ran_is_waited_out():
    """A registry outage while a worker is recreated is no reason to end a run: the kubelet retries the pull.
    A first pull that fails (a wrong or unloaded image) still fails fast, and so does an invalid name."""
    ran = {"phase": "Running", "attempt": 1, "image": "docker.io/library/trainer:1", "imageID": "sha256:abc"}
    trainer = {"phase": "Running", "attempt": 1}
    pulling = worker(0, "Pending", waiting_reason="ImagePullBackOff", waiting_message="429", image="trainer:1")
    d = decide(obs(replicas=1, pods=(head(image="trainer:1"), pulling), trainer=trainer, previous=ran))
    assert d.status.phase == "Running" and not d.delete_pods and cond(d.status, "Ready").status == "False"
    other = worker(0, "Pending", waiting_reason="ErrImagePull", image="trainer:2")
    assert decide(obs(replicas=1, pods=(head(), other), previous=ran)).status.phase == "Failed"
    invalid = worker(0, "Pending", waiting_reason="InvalidImageName", image="trainer:1")
    assert decide(obs(replicas=1, pods=(head(), invalid), previous=ran)).status.phase == "Failed"
    head_pulling = head("Pending", waiting_reason="ImagePullBackOff", waiting_message="429", image="trainer:1")
    d = decide(obs(pods=(head_pulling,), previous={**ran, "phase": "Starting"}))
    assert d.status.phase == "Pending" and d.status.message == "attempt 1: head pod Pending (ImagePullBackOff: 429)"


def test_a_spec_failure_starts_afresh_on_a_new_generation():
    """ImagePullFailed (and the other failures of a spec before it trained) end the experiment; a new
    generation of the spec, spec.image fixed, starts it again without counting a restart."""
    pulling = head("Pending", waiting_reason="ErrImagePull", image="bad:1")
    failed = decide(obs(pods=(pulling,), previous={"phase": "Pending", "attempt": 1})).status
    assert failed.phase == "Failed"
    assert decide(obs(previous=failed)).status.phase == "Failed"  # the same generation stays failed
    fixed = decide(obs(generation=2, previous=failed, failed_attempt=0))
    assert fixed.create_head == 2 and fixed.restarts == 0 and fixed.status.phase == "Pending"
    limit = decide(obs(pods=(head("Failed", exit_code=1),), backoff_limit=0,
                       previous={"phase": "Running", "attempt": 1})).status
    assert limit.phase == "Failed" and decide(obs(generation=2, previous=limit)).create_head is None


def test_resuming_before_the_old_head_is_gone_is_not_a_failure():
    """Suspend closes the attempt: a resume while the old head is still terminating waits for it, then starts
    the next attempt, with backoffLimit 0 and nothing counted."""
    d = decide(obs(suspend=True, pods=(head(),), backoff_limit=0, previous={"phase": "Running", "attempt": 1}))
    assert d.failed_attempt == 1 and d.restarts == 0
    going = decide(obs(pods=(head(deleting=True),), backoff_limit=0, previous=d.status, failed_attempt=1))
    assert going.status.phase == "Starting" and going.restarts == 0
    resumed = decide(obs(backoff_limit=0, previous=going.status, failed_attempt=1))
    assert resumed.create_head == 2 and resumed.restarts == 0 and resumed.status.last_failure is None


def test_an_invalid_edit_while_running_keeps_the_pods_and_says_why():
    """The pods go on with the spec they run; Stalled says which fields the edit got wrong, one Warning."""
    errors = ("spec.storage.uri: must be s3:// on a cluster",)
    running = {"phase": "Running", "attempt": 1}
    trainer = {"phase": "Running", "attempt": 1}
    d = decide(obs(generation=2, replicas=1, pods=(head(), worker(0)), trainer=trainer, invalid_edit=errors,
                   previous=running))
    assert d.status.phase == "Running" and not d.delete_pods and d.use_running_spec and d.create_head is None
    stalled = cond(d.status, "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "InvalidSpec") and "spec.storage.uri" in stalled.message
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidSpec")]
    again = decide(obs(generation=2, replicas=1, pods=(head(), worker(0)), trainer=trainer, invalid_edit=errors,
                       previous=d.status))
    assert again.events == []
    fixed = decide(obs(generation=3, replicas=1, pods=(head(), worker(0)), trainer=trainer, previous=again.status))
    assert cond(fixed.status, "Stalled").status == "False" and not fixed.use_running_spec


def test_an_invalid_edit_of_a_finished_experiment_leaves_it_finished():
    done = {"phase": "Succeeded", "attempt": 1, "completionTime": "2026-01-01T11:59:00Z",
            "conditions": [{"type": "Succeeded", "status": "True", "observedGeneration": 1}]}
    d = decide(obs(generation=2, spec_errors=("spec.stop: set one",), previous=done))
    assert d.status.phase == "Succeeded" and not d.events
