"""The real Kopf operator against the API emulator: spec.tracking.wandb's Secret checked before any pod
(a missing one fails the experiment naming the field), its key reaching the head only as a secretKeyRef,
and the head's image digest (the kubelet's containerStatuses[].imageID) copied into status.imageID."""

from __future__ import annotations

import pytest

from kuberl_testing.operator_harness import OperatorHarness, experiment_body, wait_for

NAMESPACE = "wandb-image"
DIGEST = "registry.example/kuberl-trainer@sha256:" + "5e" * 32


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness([NAMESPACE]) as h:
        yield h


def env_of(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_the_wandb_secret_is_checked_and_the_head_digest_reaches_the_status(harness):
    wandb = {"project": "p", "apiKeySecretRef": {"name": "wandb", "key": "api-key"}}
    harness.apply(NAMESPACE, experiment_body("nokey", workers={"replicas": 0}, tracking={"wandb": wandb}))
    wait_for(lambda: harness.status(NAMESPACE, "nokey").get("phase") == "Failed", what="Failed")
    assert harness.condition(NAMESPACE, "nokey", "Stalled")["reason"] == "SecretNotFound"
    assert harness.status(NAMESPACE, "nokey")["message"].startswith("spec.tracking.wandb.apiKeySecretRef: Secret "
                                                                    "'wandb' not found")
    assert not harness.pods(NAMESPACE)

    harness.core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": "wandb"},
                                                      "stringData": {"api-key": "k" * 40}})
    harness.apply(NAMESPACE, experiment_body("tracked", workers={"replicas": 0}, tracking={"wandb": wandb}))
    head = wait_for(lambda: harness.pods(NAMESPACE).get("tracked-head"), what="the head pod")
    env = env_of(head)
    assert env["WANDB_API_KEY"] == {"name": "WANDB_API_KEY",
                                    "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
    assert env["KUBERL_IMAGE"]["value"] == head["spec"]["containers"][0]["image"]
    assert "imageID" not in harness.status(NAMESPACE, "tracked")  # nothing pulled yet
    harness.set_pod_status(NAMESPACE, "tracked-head", "Running", ip="127.0.0.1", image_id=DIGEST)
    status = wait_for(lambda: harness.status(NAMESPACE, "tracked").get("imageID") and
                      harness.status(NAMESPACE, "tracked"), what="status.imageID")
    assert status["imageID"] == DIGEST and status["image"] == "kuberl-trainer"
