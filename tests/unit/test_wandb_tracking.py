"""spec.tracking.wandb outside the trainer's W&B calls: the API key only through a secretKeyRef on the head,
the operator's check of that Secret, what one result logs, and the trackers' one problem string."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kuberl.api.validation import validate_document
from kuberl.operator.builders import Owner, build_head_pod, build_worker_pod, resolve_experiment
from kuberl.operator.reconcile import _missing_secret
from kuberl.operator.settings import Settings
from kuberl.operator.status import decide, pod_state
from kuberl.operator.status.observation import Observation, status_of
from kuberl.trainer.iteration_result import IterationResult
from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.tracking.wandb_run import key_of, logged_row, wandb_config

SETTINGS = Settings(trainer_image="registry.example/trainer:1", operator_namespace="kuberl-system",
                    prometheus_namespace="monitoring")


def experiment(wandb: dict[str, Any] | None):
    spec: dict[str, Any] = {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "workers": {"replicas": 1},
                            "stop": {"timesteps": 1000},
                            "storage": {"uri": "s3://bucket/runs", "secretRef": {"name": "s3-creds"}}}
    if wandb is not None:
        spec["tracking"] = {"wandb": wandb}
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "e"}, "spec": spec}
    return resolve_experiment(validate_document(doc), SETTINGS, "research")


def env_of(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_the_api_key_reaches_only_the_head_and_only_as_a_secret_key_ref():
    exp = experiment({"project": "p", "apiKeySecretRef": {"name": "wandb", "key": "token"}})
    owner = Owner("e", "research", "uid")
    head = env_of(build_head_pod(exp, owner, 1, status_port=8080))
    assert head["WANDB_API_KEY"] == {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb",
                                                                                             "key": "token"}}}
    assert head["KUBERL_IMAGE"] == {"name": "KUBERL_IMAGE", "value": "registry.example/trainer:1"}
    assert "WANDB_API_KEY" not in env_of(build_worker_pod(exp, owner, 0, 1, status_port=8080))
    default_key = experiment({"project": "p", "apiKeySecretRef": {"name": "wandb"}})
    assert env_of(build_head_pod(default_key, owner, 1, status_port=8080))["WANDB_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "wandb", "key": "WANDB_API_KEY"}}
    for spec in (None, {"project": "p", "mode": "offline"}):
        assert "WANDB_API_KEY" not in env_of(build_head_pod(experiment(spec), owner, 1, status_port=8080))


def test_the_spec_refuses_an_api_key_field_and_an_unknown_mode():
    from kuberl.api.field_errors import ManifestError

    for wandb, field in (({"project": "p", "apiKey": "secret"}, "spec.tracking.wandb.apiKey"),
                         ({"project": "p", "mode": "sometimes"}, "spec.tracking.wandb.mode")):
        try:
            experiment(wandb)
        except ManifestError as e:
            assert any(error.path == field for error in e.errors), e.errors
        else:
            raise AssertionError(f"{wandb} was accepted")


class Secrets:
    """The one Cluster method _missing_secret calls, over a dict of Secrets."""

    def __init__(self, secrets: dict[str, dict]) -> None:
        self.secrets = secrets

    def secret(self, namespace: str, name: str) -> dict | None:
        return self.secrets.get(name)


def test_the_operator_names_a_missing_wandb_secret_or_key():
    exp = experiment({"project": "p", "apiKeySecretRef": {"name": "wandb", "key": "token"}})
    s3 = {"s3-creds": {"data": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}}}
    assert _missing_secret(Secrets(s3), exp, "research") == (
        "spec.tracking.wandb.apiKeySecretRef: Secret 'wandb' not found in namespace 'research'")
    assert _missing_secret(Secrets({**s3, "wandb": {"data": {"other": "x"}}}), exp, "research") == (
        "spec.tracking.wandb.apiKeySecretRef: Secret 'wandb' has no key token")
    assert _missing_secret(Secrets({**s3, "wandb": {"data": {"token": "eA=="}}}), exp, "research") is None
    assert _missing_secret(Secrets({}), exp, "research").startswith("spec.storage.secretRef")  # storage's first


def test_the_head_image_digest_goes_into_the_status():
    body = {"metadata": {"name": "e-head", "labels": {"kuberl.io/role": "head"},
                         "annotations": {"kuberl.io/attempt": "1"}},
            "spec": {"containers": [{"image": "registry.example/trainer:1"}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "image": "registry.example/trainer:1", "imageID": "registry.example/trainer@sha256:" + "a" * 64,
                "state": {"running": {}}}]}}
    import datetime

    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    d = decide(Observation(generation=1, now=now, previous=status_of({"phase": "Starting", "attempt": 1}),
                           pods=(pod_state(body),)))
    assert d.status.image == "registry.example/trainer:1"
    assert d.status.image_id.endswith("sha256:" + "a" * 64)
    assert d.status.model_dump(by_alias=True)["imageID"] == d.status.image_id
    pending = {**body, "status": {"phase": "Pending"}}
    d = decide(Observation(generation=1, now=now, previous=status_of({"phase": "Pending", "attempt": 1}),
                           pods=(pod_state(pending),)))
    assert d.status.image_id is None  # nothing pulled yet


def test_one_result_logs_every_scalar_with_env_steps_as_the_step():
    result = {"iteration": 3, "timesteps": 384, "episodeReturnMean": 21.5, "learner": {"policyLoss": -0.01},
              "evaluation": {"returnMean": 40.0, "video": "file:///r/videos/evaluation-000003.mp4"},
              "tracking": {"mlflow": {"ok": False, "problem": "x"}}, "attempt": 2, "done": True}
    row = logged_row(IterationResult.from_json(result))
    expected = {"episodeReturnMean": 21.5, "learner/policyLoss": -0.01, "evaluation/returnMean": 40.0, "iteration": 3,
                "timesteps": 384}
    assert {key: row[key] for key in expected} == expected
    assert not {"attempt", "done", "tracking/mlflow/ok", "evaluation/video"} & set(row)  # no bookkeeping, no text


def test_config_and_keys(tmp_path: Path):
    assert wandb_config({"algorithm": "ppo", "config": {"lr": 0.1}}, {"attempt": 1}) == {
        "algorithm": "ppo", "config": {"lr": 0.1}, "kuberl": {"attempt": 1}}
    store = LocalStore(tmp_path)
    assert key_of(store, store.url("videos/evaluation-000002.mp4")) == "videos/evaluation-000002.mp4"
    assert key_of(store, "s3://elsewhere/videos/x.mp4") is None


def test_problems_of_both_trackers_make_one_status_line():
    from kuberl.trainer.tracking.run_tracking import RunTracking

    class Sink:
        def __init__(self, problem: str | None) -> None:
            self.problem = problem

    tracking = RunTracking.__new__(RunTracking)
    tracking.mlflow, tracking.wandb = Sink("MLflow at http://x is unavailable"), Sink("W&B is unavailable")
    assert tracking.problem == "MLflow at http://x is unavailable; W&B is unavailable"
    result = IterationResult.from_json({"iteration": 1, "timesteps": 10})
    assert tracking.on_result(result).to_json()["tracking"] == {
        "mlflow": {"ok": False, "problem": "MLflow at http://x is unavailable"},
        "wandb": {"ok": False, "problem": "W&B is unavailable"}}
    tracking.mlflow, tracking.wandb = None, Sink(None)
    assert tracking.problem is None
    assert "tracking" not in tracking.on_result(result).to_json()
