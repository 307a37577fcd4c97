"""status.decide for the platform features: Kueue's gate (phase Queued), preemption (not counted against
backoffLimit), and the fixed size of a Kueue pod group."""

from __future__ import annotations

import datetime

from kuberl.api.types import RLExperimentStatus
from kuberl.operator.status import (
    KUEUE_MUTABLE_FIELDS,
    Observation,
    PodState,
    decide,
    pod_state,
    refused_changes,
    status_of,
    with_mutable_fields,
)

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
RUNNING = {"phase": "Running", "attempt": 1, "conditions": []}


def obs(**kw) -> Observation:
    kw.setdefault("generation", 1)
    kw.setdefault("now", NOW)
    previous = kw.pop("previous", {"phase": "Pending", "attempt": 1})  # as the API server holds it, or a decision's status
    kw["previous"] = previous if isinstance(previous, RLExperimentStatus) else status_of(previous)
    return Observation(**kw)


def pod(name, role, phase="Pending", attempt=1, index=None, **kw) -> PodState:
    return PodState(name=name, role=role, attempt=attempt, phase=phase, index=index, **kw)


def cond(status, type_):
    return next(c for c in status.conditions if c.type == type_)


def test_pod_state_reads_the_kueue_gate_and_a_disruption():
    body = {"metadata": {"name": "e-head", "labels": {"kuberl.io/role": "head"},
                         "annotations": {"kuberl.io/attempt": "2"}},
            "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}], "containers": [{"image": "i"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "StoppedByKueue"}]}}
    state = pod_state(body)
    assert state.gated and state.disruption == "StoppedByKueue" and state.attempt == 2
    body["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    body["status"]["conditions"][0]["status"] = "False"
    state = pod_state(body)
    assert not state.gated and state.disruption is None


def test_gated_pods_make_the_phase_queued_with_a_condition_that_says_so():
    pods = (pod("e-head", "head", gated=True), pod("e-worker-0", "worker", index=0, gated=True))
    d = decide(obs(replicas=1, pods=pods, kueue=True))
    assert d.status.phase == "Queued"
    ready, reconciling = cond(d.status, "Ready"), cond(d.status, "Reconciling")
    assert ready.status == "False" and ready.reason == "Queued"
    assert "admission by Kueue" in ready.message and reconciling.status == "True"
    assert not d.create_head and not d.create_workers and not d.delete_pods
    assert [e.reason for e in d.events] == ["Queued"]


def test_a_missing_worker_of_a_queued_group_is_created_so_the_group_is_complete():
    d = decide(obs(replicas=2, pods=(pod("e-head", "head", gated=True), pod("e-worker-0", "worker", index=0))))
    assert d.create_workers == [1] and d.status.phase == "Queued"


def test_admitted_pods_leave_queued():
    d = decide(obs(replicas=0, previous={"phase": "Queued", "attempt": 1}, pods=(pod("e-head", "head"),)))
    assert d.status.phase == "Pending"
    d = decide(obs(replicas=0, previous={"phase": "Queued", "attempt": 1},
                   pods=(pod("e-head", "head", phase="Running"),)))
    assert d.status.phase == "Starting"


def test_preemption_closes_the_attempt_without_counting_a_restart():
    pods = (pod("e-head", "head", phase="Running", disruption="StoppedByKueue"),
            pod("e-worker-0", "worker", phase="Running", index=0))
    d = decide(obs(replicas=1, previous=RUNNING, pods=pods, restarts=1, failed_attempt=0, backoff_limit=1))
    assert d.restarts == 1 and d.failed_attempt == 1  # closed, not counted: backoffLimit 1 is not exceeded
    assert sorted(d.delete_pods) == ["e-head", "e-worker-0"]
    assert d.status.phase == "Pending" and cond(d.status, "Ready").reason == "Preempted"
    (event,) = d.events
    assert event.reason == "Preempted" and "not counted against backoffLimit" in event.message


def test_after_preemption_the_next_attempt_starts_once_the_head_is_gone():
    deleting = pod("e-head", "head", phase="Running", disruption="StoppedByKueue", deleting=True)
    previous = {"phase": "Pending", "attempt": 1}
    d = decide(obs(replicas=1, previous=previous, pods=(deleting,), failed_attempt=1))
    assert not d.create_head and d.status.phase == "Starting"  # waits for the old head to go
    d = decide(obs(replicas=1, previous=previous, pods=(), failed_attempt=1, restarts=0))
    assert d.create_head == 2 and d.create_workers == [0] and d.restarts == 0
    assert "resumes from the last checkpoint" in d.status.message


def test_a_preempted_head_already_being_deleted_is_still_not_counted():
    deleting = pod("e-head", "head", phase="Running", disruption="EvictionByEvictionAPI", deleting=True)
    d = decide(obs(replicas=0, previous=RUNNING, pods=(deleting,), restarts=0, failed_attempt=0, backoff_limit=0))
    assert d.status.phase != "Failed" and d.failed_attempt == 1 and d.restarts == 0


def test_a_kueue_group_refuses_a_new_size_and_says_why():
    running = {"workers": {"replicas": 2}, "suspend": False}
    desired = {"workers": {"replicas": 3}, "suspend": False}
    refused = refused_changes(running, desired, KUEUE_MUTABLE_FIELDS)
    assert refused == ("spec.workers.replicas",)
    assert refused_changes(running, desired) == ()  # without Kueue, a scale change applies
    assert with_mutable_fields(running, desired, KUEUE_MUTABLE_FIELDS)["workers"]["replicas"] == 2
    d = decide(obs(replicas=2, kueue=True, refused_changes=refused, previous=RUNNING,
                   pods=(pod("e-head", "head", phase="Running"),)))
    stalled = cond(d.status, "Stalled")
    assert stalled.reason == "SpecChangeRefused" and "fixed size" in stalled.message
    assert "suspend" in stalled.message
