"""The pure helpers of a reconcile pass: validating API objects, pod ownership, status patches."""

from __future__ import annotations

from kuberl.operator.reconcile import _status_patch, experiment_of_pod, validate_body
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
