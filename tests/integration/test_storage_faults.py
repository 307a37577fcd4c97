"""Storage faults under a running `kuberl train`: a throttled S3, S3 answering 500s, S3 down for 12 s,
a full local disk.

For each: training goes on through the fault (iterations advance), nothing is lost (results.jsonl
holds every iteration once, the final checkpoint is the last iteration), and the test reports how
long the recovery took (fault cleared -> a checkpoint covering every iteration reached by then)
and the SIGTERM that ends the run (final checkpoint, exit 143, well within a pod's grace period).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kuberl.trainer.storage.checkpoints import latest_checkpoint, list_checkpoints
from kuberl.trainer.storage.local import TEMP_PREFIX, LocalStore
from kuberl.trainer.storage.s3 import S3Store
from kuberl_testing.fault_figures import report_figures
from kuberl_testing.s3server import S3Server
from kuberl_testing.trainer_process import (
    GRACE_SECONDS,
    Trainer,
    assert_results_contiguous,
    ppo_manifest,
    wait_for,
)

FAULT_SECONDS = 8.0  # long enough for the writers' backoff to grow past its first steps


def test_fault_modes_answer_like_an_unwell_store(s3: S3Server, s3_bucket: str) -> None:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    plain = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                         aws_secret_access_key="testing", config=Config(retries={"total_max_attempts": 1}))

    def code_of(key: str) -> str:
        try:
            plain.put_object(Bucket=s3_bucket, Key=key, Body=b"x" * 100)
            return "OK"
        except ClientError as e:
            return f"{e.response['ResponseMetadata']['HTTPStatusCode']} {e.response['Error']['Code']}"

    def get_code(key: str) -> str:
        try:
            plain.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
            return "OK"
        except ClientError as e:
            return f"{e.response['ResponseMetadata']['HTTPStatusCode']} {e.response['Error']['Code']}"

    try:
        s3.fail(500)
        assert code_of("a") == "500 InternalError"
        s3.fail(503, pattern="slow-")
        assert code_of("slow-1") == "503 SlowDown" and code_of("fine-1") == "OK"
        s3.fail(500, fraction=0.5)
        codes = {code_of(f"k{i}") for i in range(40)}
        assert codes == {"OK", "500 InternalError"}, codes
        s3.clear()
        s3.slow(0.3)
        delayed, started = s3.delayed, time.monotonic()
        assert code_of("b") == "OK" and time.monotonic() - started >= 0.3 and s3.delayed == delayed + 1
    finally:
        s3.clear()
    assert code_of("c") == "OK" and s3.delayed == delayed + 1  # cleared: no request delayed any more
    try:
        s3.fail(503, methods=("GET",), seconds=1.0)
        assert code_of("d") == "OK"  # a PUT is not a chosen method
        assert get_code("d") == "503 SlowDown"
        time.sleep(1.1)
        assert get_code("d") == "OK"  # the failure ended by itself
    finally:
        s3.clear()
    with pytest.raises(ValueError, match="seconds"):
        s3.fail(503, seconds=0)
    with pytest.raises(ValueError, match="status"):
        s3.fail(404)
    with pytest.raises(ValueError, match="fraction"):
        s3.fail(500, fraction=2)


def _run_through(trainer: Trainer, inject, clear, checkpoint_iteration, seconds: float) -> dict:
    """Inject a fault for `seconds` while training, clear it, time the recovery. The store is not
    read by the test during the fault (its requests would suffer the fault too)."""
    wait_for(lambda: checkpoint_iteration() > 0, 300, "the first checkpoint", interval=0.2)
    checkpoint_before = checkpoint_iteration()
    seen_at_fault = trainer.iterations_seen()
    inject()
    try:
        time.sleep(seconds)
        # Training goes on during the fault: three more iterations while it lasts (a hang guard bounds the wait).
        wait_for(lambda: trainer.proc.poll() is not None or trainer.iterations_seen() > seen_at_fault + 2, 120,
                 "training to go on during the fault (a hang guard)", interval=0.2)
        assert trainer.proc.poll() is None, trainer.output()
        seen_at_clear = trainer.iterations_seen()
    finally:
        clear()
    cleared = time.monotonic()
    wait_for(lambda: checkpoint_iteration() >= seen_at_clear, 120, "a checkpoint after the fault", interval=0.1)
    return {"fault_seconds": seconds, "iterations_during_fault": seen_at_clear - seen_at_fault,
            "recovery_seconds": time.monotonic() - cleared, "checkpoint_before_fault": checkpoint_before}


def _end_gracefully(trainer: Trainer, store, results_of, fault: str, figures: dict) -> tuple[list[dict], object]:
    """SIGTERM: exit 143 after a final checkpoint of the last iteration; (results, that checkpoint)."""
    rc, seconds = trainer.terminate(GRACE_SECONDS)
    assert rc == 143, trainer.output()
    assert "Terminated: stopped by SIGTERM after a final checkpoint" in "\n".join(trainer.lines)
    results = results_of()
    final = latest_checkpoint(store)
    assert final is not None and final.iteration == results[-1]["iteration"], "the final checkpoint lags"
    steps_lost = results[-1]["timesteps"] - final.timesteps
    assert steps_lost == 0
    report_figures(fault, **figures, sigterm_to_exit_seconds=seconds, iterations=len(results),
                   steps_lost=steps_lost, final_checkpoint=final.iteration)
    return results, final


def _reads_back_like_a_local_run(store: S3Store, s3: S3Server, results: list[dict], final, tmp_path: Path) -> None:
    """The run that went through the outage reads back from S3 like a local one: every episode's trace,
    `kuberl traces` (summary and curve) and `kuberl evaluate` of its final checkpoint."""
    from kuberl.trainer.evaluation.checkpoint import evaluate_checkpoint
    from kuberl.trainer.run.traces_report import report
    from kuberl.trainer.storage.traces import read_traces

    assert len(list(read_traces(store))) >= results[-1]["episodes"]
    text = report(store.uri, endpoint=s3.endpoint, png_path=tmp_path / "curve.png")
    assert f"results: {len(results)} iterations" in text
    assert (tmp_path / "curve.png").stat().st_size > 1000
    evaluation = evaluate_checkpoint(final.uri, episodes=2, endpoint=s3.endpoint)
    assert f"checkpoint {final.uri} (iteration {final.iteration}" in evaluation


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("fault", ["s3-slow-0.5s-per-request", "s3-500-every-request", "s3-down-12s"])
def test_training_goes_on_through_a_faulty_store_and_loses_nothing(
    s3: S3Server, s3_bucket: str, tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(ppo_manifest("faulty", f"s3://{s3_bucket}/runs", "{iterations: 100000}", every=2,
                                 endpoint=s3.endpoint))
    store = S3Store(f"s3://{s3_bucket}/runs/faulty", endpoint=s3.endpoint)

    def checkpoint_iteration() -> int:
        latest = latest_checkpoint(store)
        return latest.iteration if latest else 0

    faults = {  # (inject, clear, seconds)
        "s3-slow-0.5s-per-request": (lambda: s3.slow(0.5), s3.clear, FAULT_SECONDS),
        "s3-500-every-request": (lambda: s3.fail(500), s3.clear, FAULT_SECONDS),
        "s3-down-12s": (s3.stop, s3.start, 12.0),  # connections refused, open ones cut
    }
    inject, clear, seconds = faults[fault]
    delayed, failed = s3.delayed, s3.failed
    trainer = Trainer(path, s3.env())
    try:
        figures = _run_through(trainer, inject, clear, checkpoint_iteration, seconds)
        figures["requests_delayed_or_failed"] = s3.delayed - delayed + s3.failed - failed
        results, final = _end_gracefully(trainer, store, lambda: assert_results_contiguous(store), fault, figures)
    finally:
        s3.clear()
        s3.start()
        trainer.kill()
    if fault == "s3-down-12s":
        # This case is also the S3-outage run that test_storage_resume.py had (a second trainer through the
        # same 12 s outage, 34 s of CI): its checks of the run's files in S3 after the outage are here.
        _reads_back_like_a_local_run(store, s3, results, final, tmp_path)


def _namespaces_work() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _fill(directory: Path) -> int:
    """Write zeros into directory/filler until the file system is full; the bytes written."""
    written = 0
    chunk = b"\0" * (256 << 10)
    with open(directory / "filler", "wb", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                return written


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(not _namespaces_work(), reason="a private tmpfs needs user and mount namespaces (unshare -rm)")
def test_a_full_local_disk_pauses_writes_and_training_goes_on(tmp_path: Path) -> None:
    # The trainer runs in its own mount namespace on a 16 MB tmpfs: filling that disk touches no
    # real one. The test reaches the tmpfs through /proc/PID/root, and the shell copies the run out
    # after the trainer exits (the tmpfs goes with the namespace). SIGTERM reaches the trainer
    # through the process group; the shell ignores it so that it stays to copy.
    disk = tmp_path / "disk"
    disk.mkdir()
    path = tmp_path / "exp.yaml"
    path.write_text(ppo_manifest("full", f"file://{disk}/runs", "{iterations: 100000}", every=2))
    script = ('trap "" TERM; mount -t tmpfs -o size=16m kuberl-test "$0" || exit 97; "$@"; rc=$?; '
              'cp -a "$0/runs" "$0.after"; exit $rc')
    trainer = Trainer(path, {}, argv_prefix=["unshare", "-rm", "sh", "-c", script, str(disk)])
    inside = Path(f"/proc/{trainer.proc.pid}/root") / str(disk).lstrip("/")
    run = LocalStore(inside / "runs" / "full")

    def checkpoint_iteration() -> int:
        latest = latest_checkpoint(run) if trainer.proc.poll() is None else None
        return latest.iteration if latest else 0

    filled: list[int] = []
    try:
        figures = _run_through(trainer, lambda: filled.append(_fill(inside)), lambda: (inside / "filler").unlink(),
                               checkpoint_iteration, FAULT_SECONDS)
        output = "\n".join(trainer.lines)
        assert "No space left on device" in output, trainer.output()
        assert "Traceback" not in output, trainer.output(200)

        started = time.monotonic()
        os.killpg(trainer.proc.pid, signal.SIGTERM)
        rc = trainer.wait(GRACE_SECONDS)
        seconds = time.monotonic() - started
    finally:
        trainer.kill()
    assert rc == 143, trainer.output()
    after = LocalStore(tmp_path / "disk.after" / "full")
    # Checked once the trainer is gone (a write in flight has its temp file, rightly): nothing is
    # left behind, and every checkpoint directory with a manifest is complete.
    assert not list((tmp_path / "disk.after").rglob(f"{TEMP_PREFIX}*")), "a temp file was left behind"
    manifests = {p.parent.name for p in (tmp_path / "disk.after" / "full" / "checkpoints").glob("*/manifest.json")}
    assert manifests == {f"{c.iteration:06d}" for c in list_checkpoints(after)}
    results = assert_results_contiguous(after)
    final = latest_checkpoint(after)
    assert final is not None and final.iteration == results[-1]["iteration"]
    steps_lost = results[-1]["timesteps"] - final.timesteps
    assert steps_lost == 0
    report_figures("local-disk-full", **figures, filled_bytes=filled[0], sigterm_to_exit_seconds=seconds,
                   iterations=len(results), steps_lost=steps_lost, final_checkpoint=final.iteration)
    shutil.rmtree(tmp_path / "disk.after", ignore_errors=True)
