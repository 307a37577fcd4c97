"""RunStorage on a local store: root URIs, spec, results.jsonl, resume checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kuberl.trainer.storage.checkpoints import write_checkpoint
from kuberl.trainer.storage.jsonl import dumps_record, parse_jsonl
from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.run import RunStorage, fresh_run_root_uri, run_root_uri

SPEC = """apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {name: cp}
spec: {algorithm: ppo, env: {id: CartPole-v1}}
"""


def test_run_root_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_root_uri("s3://b/prefix/", "research", "cp") == "s3://b/prefix/research/cp"
    assert run_root_uri("s3://b", None, "cp") == "s3://b/cp"
    assert run_root_uri("file:///data/runs", None, "cp") == "file:///data/runs/cp"
    monkeypatch.chdir(tmp_path)
    assert run_root_uri(None, None, "cp") == f"file://{tmp_path}/kuberl-runs/cp"
    assert fresh_run_root_uri("s3://b/cp/", now=0) == "s3://b/cp-19700101-000000"


def test_spec_round_trip_and_resume_conflicts(tmp_path: Path) -> None:
    run = RunStorage(LocalStore(tmp_path))
    assert run.read_spec() is None
    assert run.resume_conflicts({"spec": {"algorithm": "dqn"}}) == []
    run.write_spec(SPEC)
    assert run.read_spec() == SPEC
    assert run.resume_conflicts({"spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}}}) == []
    problems = run.resume_conflicts({"spec": {"algorithm": "dqn", "env": {"id": "Acrobot-v1"}}})
    assert len(problems) == 2
    assert problems[0].startswith("spec.algorithm:") and "'ppo'" in problems[0] and "--fresh" in problems[0]
    assert problems[1].startswith("spec.env.id:")


def test_results_append_read_truncate(tmp_path: Path) -> None:
    run = RunStorage(LocalStore(tmp_path))
    for i in range(1, 6):
        run.append_result({"iteration": i, "timesteps": i * 100, "episodeReturnMean": None if i == 1 else i / 2})
    assert [r["timesteps"] for r in run.read_results()] == [100, 200, 300, 400, 500]
    assert run.truncate_results(after_iteration=3) == 2
    assert run.truncate_results(after_iteration=3) == 0
    run.append_result({"iteration": 4, "timesteps": 410})
    assert [r["timesteps"] for r in RunStorage(LocalStore(tmp_path)).read_results()] == [100, 200, 300, 410]


def test_torn_last_line_costs_only_itself(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put_bytes("results.jsonl", b'{"iteration":1,"timesteps":10}\n{"iteration":2,"time')
    run = RunStorage(store)
    run.append_result({"iteration": 2, "timesteps": 20})
    assert [r["iteration"] for r in run.read_results()] == [1, 2]


def test_records_are_plain_json() -> None:
    line = dumps_record({"a": np.float32(1.5), "b": np.arange(3), "c": math.nan, "d": {"e": math.inf}})
    assert parse_jsonl(line.encode()) == [{"a": 1.5, "b": [0, 1, 2], "c": None, "d": {"e": None}}]


def test_next_attempt_and_has_checkpoints(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    run = RunStorage(store)
    assert run.next_attempt() == 0 and not run.has_checkpoints()
    write_checkpoint(store, 1, {"m": b"x"}, timesteps=1, attempt=2)
    assert run.next_attempt() == 3 and run.has_checkpoints()


class NoAppendStore(LocalStore):
    """Behaves like S3: no append, so results go through the background rewrite."""

    append_bytes = None  # type: ignore[assignment]


def test_results_on_a_store_without_append(tmp_path: Path) -> None:
    store = NoAppendStore(tmp_path)
    store.put_bytes("results.jsonl", b'{"iteration":1,"timesteps":10}\n')
    run = RunStorage(store, flush_seconds=0.05)
    for i in range(2, 5):
        run.append_result({"iteration": i, "timesteps": i * 10})
    assert run.flush(timeout=5)
    assert [r["iteration"] for r in parse_jsonl(store.get_bytes("results.jsonl"))] == [1, 2, 3, 4]
    assert run.truncate_results(after_iteration=2) == 2
    assert [r["iteration"] for r in parse_jsonl(store.get_bytes("results.jsonl"))] == [1, 2]
    run.append_result({"iteration": 3, "timesteps": 31})
    run.close()
    assert parse_jsonl(store.get_bytes("results.jsonl"))[-1] == {"iteration": 3, "timesteps": 31}


def test_checkpoint_commits_only_after_results_are_flushed(tmp_path: Path) -> None:
    from kuberl.trainer.storage.checkpoints import CheckpointWriter, latest_checkpoint

    store = NoAppendStore(tmp_path)
    run = RunStorage(store, flush_seconds=3600)  # without the hook the line would wait an hour
    writer = CheckpointWriter(store, keep=5, before_commit=run.flush)
    run.append_result({"iteration": 1, "timesteps": 10})
    run.append_result({"iteration": 2, "timesteps": 20})
    writer.submit(2, {"m": b"x"}, timesteps=20)
    assert writer.wait(timeout=10).iteration == 2
    assert [r["iteration"] for r in parse_jsonl(store.get_bytes("results.jsonl"))][-1] == 2
    assert latest_checkpoint(store).iteration == 2
    writer.close()
    run.close()


def test_failed_before_manifest_leaves_no_checkpoint(tmp_path: Path) -> None:
    from kuberl.trainer.storage import StorageError
    from kuberl.trainer.storage.checkpoints import latest_checkpoint

    store = LocalStore(tmp_path)
    with pytest.raises(StorageError, match="not committed"):
        write_checkpoint(store, 1, {"m": b"x"}, timesteps=1, before_manifest=lambda: False)
    assert latest_checkpoint(store) is None and store.exists("checkpoints/000001/m")


def test_results_writer_of_an_older_attempt_is_fenced(tmp_path: Path) -> None:
    store = NoAppendStore(tmp_path)
    newer = RunStorage(store, attempt=3)
    newer.append_result({"iteration": 1, "timesteps": 10})
    assert newer.flush(timeout=5)
    write_checkpoint(store, 1, {"m": b"x"}, timesteps=10, attempt=3)
    zombie = RunStorage(store, attempt=2, flush_seconds=0.01)
    zombie.append_result({"iteration": 7, "timesteps": 70})
    assert not zombie.flush(timeout=5) and zombie.fenced
    zombie.append_result({"iteration": 8, "timesteps": 80})
    assert not zombie.flush(timeout=5)
    zombie.close(timeout=5)
    assert parse_jsonl(store.get_bytes("results.jsonl")) == [{"iteration": 1, "timesteps": 10}]


class FailingStore(NoAppendStore):
    """An S3-like store that refuses every write while `down`, counting the attempts."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.down = True
        self.attempts = 0

    def put_bytes(self, key: str, data: bytes) -> None:
        self.attempts += 1
        if self.down:
            raise OSError("store unavailable")
        super().put_bytes(key, data)


def test_results_retry_with_backoff_however_many_lines_arrive(tmp_path: Path) -> None:
    # Each append used to wake the retry at once: thousands of failures, then an overflowing backoff
    # that killed the writer thread and hung the trainer's exit.
    import time

    store = FailingStore(tmp_path)
    run = RunStorage(store, flush_seconds=0.05)
    for i in range(1, 2001):
        run.append_result({"iteration": i, "timesteps": i})
        if i % 100 == 0:
            time.sleep(0.1)
    assert store.attempts <= 12, store.attempts
    store.down = False
    assert run.flush(timeout=30)
    run.close()
    assert [r["iteration"] for r in RunStorage(LocalStore(tmp_path)).read_results()] == list(range(1, 2001))
