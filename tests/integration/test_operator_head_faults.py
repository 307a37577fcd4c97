"""The real operator against the API emulator for two ways a head ends badly: killed at its memory limit
(the test writes the pod's status as the kubelet would: terminated, reason OOMKilled), and a real
trainer that exits retryable because the store kept answering 500 (its termination log, as written,
becomes the pod's termination message). Both are restarted up to backoffLimit, then fail.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from kuberl_testing.fault_figures import report_figures
from kuberl_testing.operator_harness import OperatorHarness, experiment_body, wait_for
from kuberl_testing.ports import free_port
from kuberl_testing.s3server import S3Server
from kuberl_testing.trainer_process import KUBERL, ppo_manifest

NAMESPACES = ["oom-head", "oom-worker", "store-500"]


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness(NAMESPACES) as h:
        yield h


def attempt_of(h: OperatorHarness, ns: str, pod: str) -> str | None:
    return (h.pods(ns).get(pod, {}).get("metadata", {}).get("annotations") or {}).get("kuberl.io/attempt")


def warnings(h: OperatorHarness, ns: str, reason: str) -> list[dict]:
    return [e for e in h.events(ns) if e["type"] == "Warning" and e["reason"] == reason]


def test_an_oom_killed_head_is_explained_restarted_and_fails_past_backoff_limit(harness):
    ns = "oom-head"
    harness.apply(ns, experiment_body("big", backoffLimit=1, head={"memory": "3Gi"}, workers={"replicas": 0}))
    wait_for(lambda: "big-head" in harness.pods(ns), what="the head pod")
    killed = time.monotonic()
    harness.set_pod_status(ns, "big-head", "Failed", exit_code=137, reason="OOMKilled")
    wait_for(lambda: attempt_of(harness, ns, "big-head") == "2", what="the head of attempt 2")
    restarted = time.monotonic() - killed
    event = wait_for(lambda: warnings(harness, ns, "OOMKilled"), what="an OOMKilled event")[0]
    assert "pod big-head" in event["message"] and "memory limit 3Gi" in event["message"]
    assert "raise spec.head.memory" in event["message"] and "restart 1 of 1" in event["message"]
    message = harness.status(ns, "big")["message"]
    assert "attempt 1 failed: pod big-head ran out of memory" in message, message

    killed = time.monotonic()
    harness.set_pod_status(ns, "big-head", "Failed", exit_code=137, reason="OOMKilled")
    wait_for(lambda: harness.status(ns, "big").get("phase") == "Failed", what="Failed after backoffLimit")
    stalled = harness.condition(ns, "big", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "OOMKilled"
    assert "backoffLimit 1 reached" in stalled["message"] and "raise spec.head.memory" in stalled["message"]
    assert harness.created_count(ns, "pods", "big-head") == 2
    wait_for(lambda: len(warnings(harness, ns, "OOMKilled")) >= 2, what="the final OOMKilled event")
    report_figures("head-oom-killed-until-backoffLimit", head_replaced_seconds=restarted,
                   failed_phase_after_last_kill_seconds=time.monotonic() - killed)


def test_an_oom_killed_worker_is_recreated_with_a_warning(harness):
    ns = "oom-worker"
    harness.apply(ns, experiment_body("wide", workers={"replicas": 1, "memory": "2Gi"}))
    wait_for(lambda: "wide-worker-0" in harness.pods(ns), what="the worker pod")
    first_uid = harness.pods(ns)["wide-worker-0"]["metadata"]["uid"]
    harness.set_pod_status(ns, "wide-worker-0", "Failed", exit_code=137, reason="OOMKilled")
    event = wait_for(lambda: warnings(harness, ns, "OOMKilled"), what="an OOMKilled event")[0]
    assert "pod wide-worker-0" in event["message"] and "memory limit 2Gi" in event["message"]
    assert "raise spec.workers.memory" in event["message"]
    wait_for(lambda: harness.pods(ns).get("wide-worker-0", {}).get("metadata", {}).get("uid") not in (None, first_uid),
             what="the worker recreated")
    assert harness.status(ns, "wide")["phase"] != "Failed"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_head_whose_store_answers_500_is_retried_then_fails_with_the_storage_error(
    harness, s3: S3Server, s3_bucket: str, tmp_path: Path
):
    # The head's termination message comes from a real `kuberl train --in-cluster` against a store
    # that answers 500 to everything: exit 1 (retryable), not 2 (InvalidSpec).
    path = tmp_path / "exp.yaml"
    path.write_text(ppo_manifest("flaky", f"s3://{s3_bucket}/runs", "{iterations: 2}", every=1, endpoint=s3.endpoint))
    log = tmp_path / "termination-log"
    env = {**os.environ, **s3.env(), "KUBERL_STORAGE_RETRY_SECONDS": "3", "KUBERL_TERMINATION_LOG": str(log),
           "KUBERL_STATUS_PORT": str(free_port()), "KUBERL_STATUS_HOST": "127.0.0.1", "KUBERL_ATTEMPT": "1"}
    s3.fail(500)
    try:
        proc = subprocess.run([KUBERL, "train", "--in-cluster", "-f", str(path)], env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        s3.clear()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = log.read_text()

    ns = "store-500"
    harness.apply(ns, experiment_body("flaky", backoffLimit=1, workers={"replicas": 0}))
    for attempt in ("1", "2"):
        wait_for(lambda a=attempt: attempt_of(harness, ns, "flaky-head") == a, what=f"the head of attempt {attempt}")
        harness.set_pod_status(ns, "flaky-head", "Failed", exit_code=proc.returncode, message=summary)
        if attempt == "1":
            event = wait_for(lambda: warnings(harness, ns, "HeadFailed"), what="a HeadFailed event")[0]
            assert "exit code 1: storage: the store still fails" in event["message"], event
    wait_for(lambda: harness.status(ns, "flaky").get("phase") == "Failed", what="Failed after backoffLimit")
    stalled = harness.condition(ns, "flaky", "Stalled")
    assert stalled["reason"] == "BackoffLimitExceeded", stalled
    assert "KUBERL_STORAGE_RETRY_SECONDS" in stalled["message"] and "answered 500" in stalled["message"]
    assert harness.created_count(ns, "pods", "flaky-head") == 2
    assert not warnings(harness, ns, "InvalidSpec")
