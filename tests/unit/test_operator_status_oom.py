"""status.decide for pods killed at their memory limit, and for a trainer that refuses at start (exit 2)."""

from __future__ import annotations

import datetime

from kuberl.api.types import RLExperimentStatus
from kuberl.operator.status import Observation, PodState, decide, out_of_memory, pod_state, status_of

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
RUNNING = {"phase": "Running", "attempt": 1}


def obs(**kw) -> Observation:
    kw.setdefault("generation", 1)
    kw.setdefault("now", NOW)
    previous = kw.pop("previous", {})  # as the API server holds it, or a decision's status
    kw["previous"] = previous if isinstance(previous, RLExperimentStatus) else status_of(previous)
    return Observation(**kw)


def oom_head(attempt: int = 1) -> PodState:
    return PodState(name="e-head", role="head", attempt=attempt, phase="Failed", exit_code=137,
                    termination_reason="OOMKilled", memory_limit="4Gi")


def cond(status, type_):
    return next(c for c in status.conditions if c.type == type_)


def test_pod_state_reads_the_kubelets_reason_and_the_memory_limit():
    body = {
        "metadata": {"name": "e-head", "labels": {"kuberl.io/role": "head"},
                     "annotations": {"kuberl.io/attempt": "2"}},
        "spec": {"containers": [{"image": "t", "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}]},
        "status": {"phase": "Failed", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]},
    }
    state = pod_state(body)
    assert (state.termination_reason, state.memory_limit, state.exit_code) == ("OOMKilled", "4Gi", 137)
    assert out_of_memory(state) == ("pod e-head ran out of memory (OOMKilled at its memory limit 4Gi); "
                                    "raise spec.head.memory")
    body["spec"]["containers"][0]["resources"] = {}
    assert "no memory limit" in out_of_memory(pod_state(body))


def test_an_oom_killed_head_is_restarted_with_the_reason_in_status_and_event():
    d = decide(obs(previous=RUNNING, pods=(oom_head(),), backoff_limit=3))
    assert d.status.phase == "Starting" and d.delete_pods == ["e-head"]
    assert (d.restarts, d.failed_attempt) == (1, 1)
    for type_ in ("Ready", "Reconciling"):
        assert cond(d.status, type_).reason == "OOMKilled"
    message = d.status.message
    assert "pod e-head" in message and "memory limit 4Gi" in message and "raise spec.head.memory" in message
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "OOMKilled")]
    assert "restart 1 of 3" in d.events[0].message and "spec.head.memory" in d.events[0].message


def test_the_next_attempt_keeps_saying_why_the_last_one_ended():
    first = decide(obs(previous=RUNNING, pods=(oom_head(),)))
    d = decide(obs(previous=first.status, restarts=first.restarts, failed_attempt=first.failed_attempt))
    assert d.create_head == 2
    assert d.status.message.startswith("attempt 2 resumes from the last checkpoint (attempt 1 failed: pod e-head")
    assert "spec.head.memory" in d.status.message
    why = first.status.message
    pending = PodState(name="e-head", role="head", attempt=2, phase="Pending")
    d = decide(obs(previous=d.status, pods=(pending,), restarts=1, failed_attempt=1))
    assert d.status.message == f"attempt 2: head pod Pending ({why})"
    started = PodState(name="e-head", role="head", attempt=2, phase="Running")
    d = decide(obs(previous=d.status, pods=(started,), restarts=1, failed_attempt=1))
    assert d.status.message == f"attempt 2: head running, waiting for the trainer ({why})"
    d = decide(obs(previous=d.status, pods=(started,), restarts=1, failed_attempt=1,
                   trainer={"phase": "Running", "attempt": 2}))
    assert d.status.phase == "Running" and "failed" not in d.status.message  # training again


def test_the_last_failure_is_a_field_that_outlasts_the_messages_between():
    first = decide(obs(previous=RUNNING, pods=(oom_head(),)))
    failure = first.status.last_failure
    assert failure is not None and (failure.attempt, failure.reason) == (1, "OOMKilled")
    assert failure.message == out_of_memory(oom_head())
    assert first.status.to_manifest()["lastFailure"] == {"attempt": 1, "reason": "OOMKilled", "message": failure.message}
    # The failed head takes a while to go (graceful deletion): a pass says so, and the next attempt still
    # says why the last one ended (a search of the previous message for it found nothing here).
    going = PodState(name="e-head", role="head", attempt=1, phase="Failed", deleting=True)
    waiting = decide(obs(previous=first.status, pods=(going,), restarts=1, failed_attempt=1))
    assert waiting.status.message == "waiting for the old head pod to go" and waiting.status.last_failure == failure
    d = decide(obs(previous=waiting.status, restarts=1, failed_attempt=1))
    assert d.create_head == 2 and d.status.message.endswith(f"(attempt 1 failed: {failure.message})")
    trained = decide(obs(previous=d.status, pods=(PodState(name="e-head", role="head", attempt=2, phase="Running"),),
                         restarts=1, failed_attempt=1, trainer={"phase": "Running", "attempt": 2}))
    assert trained.status.last_failure == failure and "failed" not in trained.status.message


def test_a_preempted_attempt_is_no_failure_of_the_next():
    previous = {"phase": "Running", "attempt": 2, "lastFailure": {"attempt": 1, "reason": "HeadFailed",
                                                                   "message": "exit code 1"}}
    taken = PodState(name="e-head", role="head", attempt=2, phase="Running", disruption="StoppedByKueue")
    d = decide(obs(previous=previous, pods=(taken,), restarts=1, failed_attempt=1))
    d = decide(obs(previous=d.status, restarts=1, failed_attempt=2))
    assert d.create_head == 3 and "failed" not in d.status.message


def test_past_backoff_limit_the_experiment_fails_as_oom_killed():
    previous = {"phase": "Running", "attempt": 2}
    d = decide(obs(previous=previous, pods=(oom_head(attempt=2),), backoff_limit=1, restarts=1, failed_attempt=1))
    assert d.status.phase == "Failed"
    stalled = cond(d.status, "Stalled")
    assert stalled.status == "True" and stalled.reason == "OOMKilled"
    assert "backoffLimit 1 reached" in stalled.message and "raise spec.head.memory" in stalled.message
    assert cond(d.status, "Succeeded").reason == "OOMKilled"
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "OOMKilled")]
    assert "e-head" not in d.delete_pods  # kept for its logs


def test_an_oom_killed_worker_is_recreated_and_the_status_says_which_setting_to_raise():
    head = PodState(name="e-head", role="head", attempt=1, phase="Running")
    worker = PodState(name="e-worker-1", role="worker", attempt=1, phase="Failed", index=1, exit_code=137,
                      termination_reason="OOMKilled", memory_limit="8Gi")
    ok = PodState(name="e-worker-0", role="worker", attempt=1, phase="Running", index=0)
    d = decide(obs(previous=RUNNING, replicas=2, pods=(head, ok, worker),
                   trainer={"phase": "Running", "attempt": 1}))
    assert d.delete_pods == ["e-worker-1"] and d.status.phase == "Running"
    assert cond(d.status, "Ready").reason == "OOMKilled"
    assert "pod e-worker-1" in d.status.message and "memory limit 8Gi" in d.status.message
    assert "raise spec.workers.memory" in d.status.message
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "OOMKilled")]
    assert d.events[0].message.endswith("; recreating it")
    assert d.restarts == 0  # a worker is not a head restart


def test_a_worker_that_failed_otherwise_is_still_worker_lost():
    head = PodState(name="e-head", role="head", attempt=1, phase="Running")
    worker = PodState(name="e-worker-0", role="worker", attempt=1, phase="Failed", index=0, exit_code=1,
                      termination_reason="Error")
    d = decide(obs(previous=RUNNING, replicas=1, pods=(head, worker), trainer={"phase": "Running", "attempt": 1}))
    assert [e.reason for e in d.events] == ["WorkerLost"]
    assert cond(d.status, "Ready").reason != "OOMKilled"


def test_a_trainer_refusing_at_start_carries_its_message_into_status_and_event():
    refusal = ("spec.replay.capacity: 1,000,000 transitions of 28,224 bytes need 26.3 GiB; "
               "the head's memory is 4Gi (spec.head.memory)")
    head = PodState(name="e-head", role="head", attempt=1, phase="Failed", exit_code=2, termination_reason="Error",
                    termination={"result": "InvalidSpec", "reason": "InvalidSpec", "message": refusal})
    d = decide(obs(previous={"phase": "Starting", "attempt": 1}, pods=(head,)))
    assert d.status.phase == "Failed" and d.status.message == refusal
    assert cond(d.status, "Stalled").reason == "InvalidSpec" and cond(d.status, "Stalled").message == refusal
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidSpec")]
    assert refusal in d.events[0].message
    assert d.restarts == 0 and "e-head" not in d.delete_pods
