"""`kuberl train` processes against moto's S3 server: kill -9 mid-checkpoint, and a store that cannot be used.

An S3 outage mid-run is test_storage_faults.py's s3-down-12s case (training goes on, nothing is lost, and the
run reads back from S3 with `kuberl traces` and `kuberl evaluate`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kuberl.trainer.storage.checkpoints import latest_checkpoint, list_checkpoints
from kuberl.trainer.storage.run import RunStorage
from kuberl.trainer.storage.s3 import S3Store
from kuberl_testing.fault_figures import report_figures
from kuberl_testing.s3server import S3Server
from kuberl_testing.trainer_process import KUBERL, Trainer, ppo_manifest, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # trainer processes on a busy CI machine


def manifest(name: str, bucket: str, endpoint: str, stop: str, every: int) -> str:
    return ppo_manifest(name, f"s3://{bucket}/runs", stop, every, endpoint=endpoint)


def assert_results_monotonic(store: S3Store) -> list[dict]:
    """Iterations and timesteps strictly increase through results.jsonl: nothing repeated or going back."""
    results = RunStorage(store).read_results()
    iterations = [r["iteration"] for r in results]
    timesteps = [r["timesteps"] for r in results]
    assert iterations and iterations[0] == 1
    assert all(b > a for a, b in zip(iterations, iterations[1:], strict=False)), iterations
    assert all(b > a for a, b in zip(timesteps, timesteps[1:], strict=False)), timesteps
    return results


def test_kill_during_a_checkpoint_write_resumes_from_the_previous_one(
    s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(manifest("killed", s3_bucket, s3.endpoint, "{iterations: 100000}", every=3))
    store = S3Store(f"s3://{s3_bucket}/runs/killed", endpoint=s3.endpoint)
    trainer = Trainer(path, s3.env())
    try:
        wait_for(lambda: store.exists("checkpoints/latest"), 300, "the first checkpoint")
        s3.stall("manifest.json")  # the next checkpoint's files land, its manifest hangs
        stalled_before = s3.stalled
        wait_for(lambda: s3.stalled > stalled_before, 300, "a checkpoint write in progress")
        trainer.kill()
    finally:
        trainer.kill()
        s3.release()
    complete = list_checkpoints(store)
    previous = complete[-1].iteration
    killed_results = RunStorage(store).read_results()  # what the killed run had written
    torn = sorted({k.split("/")[1] for k in store.list("checkpoints/") if k.count("/") == 2})[-1]
    assert int(torn) > previous and not store.exists(f"checkpoints/{torn}/manifest.json")
    assert store.list(f"checkpoints/{torn}/"), "the killed write left no files: nothing was torn"

    report_figures("kill-9-mid-checkpoint", checkpoint_every=3, resumed_from=previous,
                   iterations_lost=killed_results[-1]["iteration"] - previous,
                   steps_lost=killed_results[-1]["timesteps"] - complete[-1].timesteps)
    stop_at = int(torn) + 3
    path.write_text(manifest("killed", s3_bucket, s3.endpoint, f"{{iterations: {stop_at}}}", every=3))
    rerun = Trainer(path, s3.env())
    try:
        assert rerun.wait(timeout=300) == 0, rerun.output()
    finally:
        rerun.kill()
    assert f"resuming from {store.url(f'checkpoints/{previous:06d}')}" in "\n".join(rerun.lines)
    results = assert_results_monotonic(store)
    resumed = [r["iteration"] for r in results if r["iteration"] > previous]
    assert resumed == list(range(previous + 1, stop_at + 1))  # the rerun's lines, none of the killed run's
    final = latest_checkpoint(store)
    assert final.iteration == stop_at
    # No torn directory survives: the rerun either rewrote it whole or, when its final checkpoint
    # replaced that write (the newest pending state wins), retention removed it as partial.
    if store.exists(f"checkpoints/{torn}/manifest.json"):
        manifest_of_torn = json.loads(store.get_bytes(f"checkpoints/{torn}/manifest.json"))
        assert manifest_of_torn["iteration"] == int(torn)
        assert int(torn) in {c.iteration for c in list_checkpoints(store)}
    else:
        assert not store.list(f"checkpoints/{torn}/"), "a torn checkpoint directory was left behind"


@pytest.mark.parametrize("problem", ["no-bucket", "dead-endpoint"])
def test_unusable_store_exits_naming_the_uri(s3: S3Server, tmp_path: Path, problem: str) -> None:
    # No bucket is the user's mistake: exit 2 at once. A refused connection may be a store that is
    # restarting: retried for KUBERL_STORAGE_RETRY_SECONDS, then exit 1 (retryable), never 2.
    from kuberl_testing.ports import free_port

    endpoint = s3.endpoint if problem == "no-bucket" else f"http://127.0.0.1:{free_port()}"
    path = tmp_path / "exp.yaml"
    path.write_text(manifest("bad", "no-such-bucket", endpoint, "{iterations: 1}", every=1))
    proc = subprocess.run([KUBERL, "train", "-f", str(path)], cwd=tmp_path,
                          env={**os.environ, **s3.env(), "KUBERL_STORAGE_RETRY_SECONDS": "3"},
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == (2 if problem == "no-bucket" else 1), proc.stdout + proc.stderr
    assert "s3://no-such-bucket/runs/bad" in proc.stderr
    assert ("does not exist" if problem == "no-bucket" else "cannot reach") in proc.stderr
    assert "Traceback" not in proc.stderr
