"""The pure helpers of a reconcile pass: validating API objects, pod ownership, status patches."""

from __future__ import annotations

import datetime

from kuberl.operator.builders.podgroup import Placement
from kuberl.operator.reconcile import _apply, _ours, _status_patch, experiment_of_pod, validate_body
from kuberl.operator.settings import Settings
from kuberl.operator.status import Observation, decide, pod_state, status_of
from kuberl_testing.operator_harness import experiment_body


def api_object(**spec):
    body = experiment_body("exp", **spec)
    body["metadata"].update(namespace="ns", uid="u1", resourceVersion="7", generation=2,
                            annotations={"kuberl.io/last-handled-configuration": "{}"})
    body["status"] = {"phase": "Running", "someFutureField": 1}
    return body


def test_validate_body_ignores_server_metadata_and_status():
    experiment, errors = validate_body(api_object())
    assert errors == () and experiment is not None and experiment.metadata.namespace == "ns"


def test_validate_body_names_the_fields_of_schema_cross_field_and_cluster_errors():
    _, errors = validate_body(api_object(algorithm="apex-dqn", replay={"shards": 0}))
    assert any(e.startswith("spec.replay.shards") for e in errors)
    _, errors = validate_body(api_object(rollouts={"workers": -1}))
    assert any(e.startswith("spec.rollouts.workers") for e in errors)
    _, errors = validate_body(api_object(storage={"uri": "file:///tmp/x"}))
    assert any(e.startswith("spec.storage.uri") for e in errors)
    _, errors = validate_body(api_object(learner={"gpus": 1}))
    assert any(e.startswith("spec.learner.gpus") for e in errors)
    body = api_object()
    del body["spec"]
    _, errors = validate_body(body)
    assert errors and all("Traceback" not in e for e in errors)


def test_experiment_of_pod_follows_the_owner_reference():
    pod = {"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"},
                                            {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                             "name": "exp"}]}}
    assert experiment_of_pod(pod) == "exp"
    assert experiment_of_pod({"metadata": {}}) is None


def test_status_patch_nulls_removed_keys_and_skips_unchanged_ones():
    assert _status_patch({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 5}) == {"b": 5, "c": None}
    assert _status_patch({"a": 1}, {"a": 1}) == {}


def test_reconcile_retries_back_off_to_a_cap_for_any_failure_count():
    from kuberl.operator.experiments import retry_seconds

    assert [retry_seconds(n) for n in (1, 2, 3, 6)] == [2.0, 4.0, 8.0, 60.0]
    assert retry_seconds(5000) == 60.0  # weeks of failures: still the cap, no OverflowError


class StatusRecorder:
    """The one write of a pass that decides nothing but status (a refused spec: no children, no pods)."""

    def __init__(self) -> None:
        self.patches: list[dict] = []

    def patch_experiment_status(self, namespace, name, status) -> None:
        self.patches.append(status)


def test_a_pass_patches_the_typed_status_as_camel_case_json_and_leaves_unknown_keys_alone():
    body = api_object()
    body["status"] = {"phase": "Running", "attempt": 3, "startTime": "2026-01-01T11:00:00Z", "someFutureField": 1}
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
    decision = decide(Observation(generation=2, now=now, previous=status_of(body["status"]),
                                  spec_errors=("spec.env.id: unknown env",)))
    cluster = StatusRecorder()
    _apply(cluster, Settings(), body, None, None, decision, Placement(), children_ready=True)
    (patch,) = cluster.patches
    assert "someFutureField" not in patch and "attempt" not in patch and "startTime" not in patch  # unchanged
    assert patch["phase"] == "Failed" and type(patch["phase"]) is str and patch["observedGeneration"] == 2
    assert patch["completionTime"] == "2026-01-01T12:00:00Z" and patch["workers"] == 0
    assert [c["type"] for c in patch["conditions"]] == ["Ready", "Succeeded", "Reconciling", "Stalled"]
    assert patch["conditions"][3] == {"type": "Stalled", "status": "True", "reason": "InvalidSpec",
                                      "message": "spec.env.id: unknown env", "lastTransitionTime": "2026-01-01T12:00:00Z",
                                      "observedGeneration": 2}


def test_pods_of_a_former_experiment_of_the_same_name_are_on_their_way_out_not_adopted():
    """Deleted and applied again before the garbage collector took the old pods: the new experiment neither
    counts them (nor a restart when they go) nor deletes them, and waits for their names to be free."""
    def pod(owner_uid):
        return {"metadata": {"name": "exp-head", "labels": {"kuberl.io/role": "head"},
                             "annotations": {"kuberl.io/attempt": "1"},
                             "ownerReferences": [{"kind": "RLExperiment", "uid": owner_uid, "controller": True}]},
                "status": {"phase": "Running"}}
    old = _ours(pod_state(pod("uid-old")), pod("uid-old"), "uid-new")
    assert old.deleting
    assert not _ours(pod_state(pod("uid-new")), pod("uid-new"), "uid-new").deleting
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
    d = decide(Observation(generation=1, now=now, previous=status_of(None), pods=(old,), backoff_limit=0))
    assert d.create_head is None and not d.delete_pods and d.restarts == 0 and d.status.phase == "Starting"
    after = decide(Observation(generation=1, now=now, previous=d.status, backoff_limit=0))
    assert after.create_head == 1 and after.restarts == 0


def _accepted_status(generation: int, stalled_reason: str | None = None) -> dict:
    conditions = [{"type": "Stalled", "status": "True", "reason": stalled_reason, "message": "x",
                   "lastTransitionTime": "2026-01-01T00:00:00Z"}] if stalled_reason else []
    return {"phase": "Pending", "observedGeneration": generation, "conditions": conditions}


def test_a_spec_an_earlier_operator_accepted_keeps_its_settings_without_effect_until_it_changes():
    body = api_object(replay={"capacity": 5000})  # PPO keeps no replay: refused in a new spec
    del body["status"]
    _, errors = validate_body(body)
    assert any(e.startswith("spec.replay") and "no effect" in e for e in errors), errors
    # the same generation, observed and not refused (queued before an upgrade): it goes on
    body["status"] = _accepted_status(body["metadata"]["generation"])
    experiment, errors = validate_body(body)
    assert errors == () and experiment is not None
    # changed since (a new generation), or refused for its spec when observed: validated in full
    body["metadata"]["generation"] += 1
    assert validate_body(body)[1]
    body["status"] = _accepted_status(body["metadata"]["generation"], stalled_reason="InvalidSpec")
    assert validate_body(body)[1]
    # ratcheting lets through only what has no effect: a value that cannot work is refused all the same
    body = api_object(rollouts={"workers": -1})
    body["status"] = _accepted_status(body["metadata"]["generation"])
    assert any(e.startswith("spec.rollouts.workers") for e in validate_body(body)[1])
