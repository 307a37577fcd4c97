"""An unwell store when `kuberl train` starts: transient errors are retried for a bounded time, then
the trainer exits retryable (1); a user's mistake (no such bucket, a wrong key) is exit 2 at once.

The cluster cases run the trainer with --in-cluster as the head pod would (it fails before it needs
Ray) and read the summary it leaves in the termination log, which the operator turns into the status.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from kuberl.trainer.storage.checkpoints import latest_checkpoint
from kuberl.trainer.storage.s3 import S3Store
from kuberl_testing.fault_figures import report_figures
from kuberl_testing.ports import free_port
from kuberl_testing.s3server import S3Server, S3ServerProcess
from kuberl_testing.trainer_process import KUBERL, Trainer, assert_results_contiguous, ppo_manifest, wait_for

START_FAULT_SECONDS = 8.0  # past the first checks' retries (the old code gave up after 2 attempts)
SHORT_RETRY = {"KUBERL_STORAGE_RETRY_SECONDS": "6"}


def _train(path: Path, env: dict[str, str], *extra: str, timeout: float = 300) -> tuple[int, str, float]:
    """(exit code, output, seconds) of one `kuberl train` run."""
    started = time.monotonic()
    proc = subprocess.run([KUBERL, "train", "-f", str(path), *extra], cwd=path.parent, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def _in_cluster(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    return {**env, "KUBERL_TERMINATION_LOG": str(tmp_path / "termination-log"),
            "KUBERL_STATUS_PORT": str(free_port()), "KUBERL_STATUS_HOST": "127.0.0.1",
            "KUBERL_EXPERIMENT_NAMESPACE": "research", "KUBERL_ATTEMPT": "1"}


def _manifest(tmp_path: Path, name: str, uri: str, endpoint: str, iterations: int = 3) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(ppo_manifest(name, uri, f"{{iterations: {iterations}}}", every=1, endpoint=endpoint))
    return path


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_store_answering_503_at_first_delays_the_start_and_the_run_completes(
    s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    path = _manifest(tmp_path, "slowdown", f"s3://{s3_bucket}/runs", s3.endpoint)
    failed = s3.failed
    s3.fail(503)
    trainer = Trainer(path, s3.env())
    try:
        # The fault lasts START_FAULT_SECONDS from the trainer's first request, however long its start takes.
        wait_for(lambda: s3.failed > failed, 120, "the trainer's first request to meet the fault")
        time.sleep(START_FAULT_SECONDS)
        started_during_fault = any(ln.startswith("training ppo") for ln in trainer.lines)
        s3.clear()
        cleared = time.monotonic()
        wait_for(lambda: any(ln.startswith("training ppo") for ln in trainer.lines), 120, "training to start")
        started_after_fault = time.monotonic() - cleared
        rc = trainer.wait(120)
    finally:
        s3.clear()
        trainer.kill()
    output = trainer.output(100)
    assert rc == 0, output
    assert "transient storage error" in output and "answered 503" in output, output  # HEAD: no body, no code
    assert "Traceback" not in output, output
    assert s3.failed - failed >= 2  # the checks did meet the fault
    assert not started_during_fault, "training started while the store still refused"
    store = S3Store(f"s3://{s3_bucket}/runs/slowdown", endpoint=s3.endpoint)
    assert [r["iteration"] for r in assert_results_contiguous(store)] == [1, 2, 3]
    final = latest_checkpoint(store)
    assert final is not None and final.iteration == 3
    report_figures("s3-503-first-8s-at-start", fault_seconds=START_FAULT_SECONDS,
                   training_started_after_the_store_answered_seconds=started_after_fault,
                   requests_failed=s3.failed - failed, exit_code=rc)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_store_answering_500_forever_ends_the_head_retryable_not_invalid_spec(
    s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    path = _manifest(tmp_path, "broken", f"s3://{s3_bucket}/runs", s3.endpoint)
    env = _in_cluster(tmp_path, {**s3.env(), **SHORT_RETRY})
    s3.fail(500)
    try:
        rc, output, seconds = _train(path, env, "--in-cluster")
        s3.fail(500, methods=("GET",))  # the bucket answers HEAD, its listing fails (as seen on a second S3)
        local_rc, local_output, _ = _train(path, {**s3.env(), **SHORT_RETRY})
    finally:
        s3.clear()
    assert rc == 1, output
    summary = json.loads((tmp_path / "termination-log").read_text())
    assert summary["result"] == "Failed" and summary["reason"] == "StorageUnavailable", summary
    assert "KUBERL_STORAGE_RETRY_SECONDS" in summary["message"] and "answered 500" in summary["message"], summary
    assert "Traceback" not in output, output
    # The retry budget, not botocore's give-up after two attempts: retried, and for all of its 6 s.
    attempts = re.search(r"still fails after (\d+) attempt\(s\) in 6 s", summary["message"])
    assert attempts and int(attempts.group(1)) >= 2, summary["message"]
    assert seconds >= 6, seconds
    assert seconds < 120, f"a hang guard: {seconds:.0f} s past a 6-second retry budget"
    # `kuberl train` on a laptop: the same retryable exit with one clear line.
    assert local_rc == 1, local_output
    assert "error: storage: the store still fails" in local_output and "Traceback" not in local_output
    assert "answered InternalError" in local_output and "ListObjectsV2" in local_output, local_output
    report_figures("s3-500-forever-at-start", retry_seconds=6, exit_seconds=seconds, exit_code=rc,
                   reason=summary["reason"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_checkpoint_that_cannot_be_read_yet_is_retried_before_resuming(
    s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    uri = f"s3://{s3_bucket}/runs"
    rc, output, _ = _train(_manifest(tmp_path, "resume", uri, s3.endpoint, iterations=2), s3.env())
    assert rc == 0, output
    # Object reads of the checkpoints fail (listing and writes work): a resume must wait, not start afresh.
    s3.fail(500, pattern="/checkpoints/", methods=("GET",), seconds=10)
    try:
        rc, output, _ = _train(_manifest(tmp_path, "resume", uri, s3.endpoint, iterations=4), s3.env())
    finally:
        s3.clear()
    assert rc == 0, output
    assert "transient storage error" in output and "resuming from" in output, output
    store = S3Store(f"{uri}/resume", endpoint=s3.endpoint)
    assert [r["iteration"] for r in assert_results_contiguous(store)] == [1, 2, 3, 4]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_missing_bucket_and_a_wrong_key_are_still_invalid_spec_at_once(s3: S3Server, tmp_path: Path) -> None:
    cases = {"missing-bucket": (s3.endpoint, "does not exist")}
    with S3ServerProcess(extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as strict:  # knows no key "testing"
        cases["wrong-key"] = (strict.endpoint, "access denied")
        for case, (endpoint, words) in cases.items():
            path = _manifest(tmp_path, case, "s3://no-such-bucket/runs", endpoint)
            env = _in_cluster(tmp_path, s3.env())  # a long retry budget: a retry would show as time
            rc, output, seconds = _train(path, env, "--in-cluster")
            assert rc == 2, output
            summary = json.loads((tmp_path / "termination-log").read_text())
            assert summary["result"] == "InvalidSpec" and words in summary["message"], summary
            assert "transient" not in output, output
            assert seconds < 60, f"a hang guard: {seconds:.0f} s (a retry would use the 120 s budget)"
            report_figures(f"s3-{case}-at-start", exit_seconds=seconds, exit_code=rc)
