"""The checkpoint protocol on a local store: manifest, latest, verification, retention, fencing, writer."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from kuberl.trainer.storage import StorageError
from kuberl.trainer.storage.checkpoints import (
    BEST,
    LATEST,
    CheckpointCorrupt,
    CheckpointWriter,
    FencedError,
    apply_retention,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_best_pointer,
    read_checkpoint,
    restore_latest,
    write_best,
    write_checkpoint,
)
from kuberl.trainer.storage.local import LocalStore
from kuberl_testing.trainer_process import wait_for


def state(i: int) -> dict[str, bytes]:
    return {"model.pt": bytes([i % 256]) * (100 + i), "counters.json": json.dumps({"i": i}).encode()}


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "run")


def test_write_then_read_round_trip(store: LocalStore) -> None:
    info = write_checkpoint(store, 3, state(3), timesteps=300, attempt=1)
    assert (info.iteration, info.timesteps, info.attempt, info.key) == (3, 300, 1, "checkpoints/000003")
    assert info.files == {"model.pt": 103, "counters.json": len(state(3)["counters.json"])}
    manifest = json.loads(store.get_bytes("checkpoints/000003/manifest.json"))
    assert manifest["files"]["model.pt"]["size"] == 103 and len(manifest["files"]["model.pt"]["sha256"]) == 64
    assert json.loads(store.get_bytes(LATEST))["checkpoint"] == "000003"
    assert latest_checkpoint(store) == info
    assert read_checkpoint(store, info) == state(3)


def test_partial_checkpoint_without_manifest_does_not_exist(store: LocalStore) -> None:
    write_checkpoint(store, 1, state(1), timesteps=10)
    store.put_bytes("checkpoints/000002/model.pt", b"half")  # crashed before the manifest
    assert [c.iteration for c in list_checkpoints(store)] == [1]
    assert latest_checkpoint(store).iteration == 1


def test_latest_pointing_at_a_broken_checkpoint_falls_back(store: LocalStore) -> None:
    write_checkpoint(store, 1, state(1), timesteps=10)
    write_checkpoint(store, 2, state(2), timesteps=20)
    store.delete("checkpoints/000002/model.pt")
    assert latest_checkpoint(store).iteration == 1
    store.put_bytes(LATEST, b"garbage{")
    assert latest_checkpoint(store).iteration == 1


def test_a_complete_checkpoint_newer_than_latest_wins(store: LocalStore) -> None:
    write_checkpoint(store, 10, state(10), timesteps=100, attempt=1)
    pointer = store.get_bytes(LATEST)
    write_checkpoint(store, 21, state(21), timesteps=210, attempt=1)
    store.put_bytes(LATEST, pointer)  # killed after the manifest of 21, before `latest` moved
    assert latest_checkpoint(store).iteration == 21
    files, info = restore_latest(store)
    assert info.iteration == 21 and files == state(21)


def test_a_newer_attempt_wins_over_a_higher_iteration(store: LocalStore) -> None:
    write_checkpoint(store, 30, state(30), timesteps=300, attempt=1)
    write_checkpoint(store, 25, state(25), timesteps=250, attempt=2)  # resumed elsewhere, then progressed
    assert latest_checkpoint(store).iteration == 25


def test_corrupted_file_of_same_size_is_detected_and_skipped(store: LocalStore) -> None:
    write_checkpoint(store, 1, state(1), timesteps=10)
    info2 = write_checkpoint(store, 2, state(2), timesteps=20)
    flipped = bytearray(store.get_bytes("checkpoints/000002/model.pt"))
    flipped[5] ^= 0xFF
    store.put_bytes("checkpoints/000002/model.pt", bytes(flipped))
    with pytest.raises(CheckpointCorrupt, match="model.pt"):
        read_checkpoint(store, info2)
    files, info = restore_latest(store)
    assert info.iteration == 1 and files == state(1)


def test_load_checkpoint_by_directory_or_run_root(store: LocalStore) -> None:
    write_checkpoint(store, 4, state(4), timesteps=40)
    write_checkpoint(store, 8, state(8), timesteps=80)
    files, info = load_checkpoint(store.uri)
    assert info.iteration == 8 and files == state(8)
    files, info = load_checkpoint(store.url("checkpoints/000004"))
    assert info.iteration == 4 and files == state(4)
    files, info = load_checkpoint(store.url("checkpoints"))
    assert info.iteration == 8
    with pytest.raises(StorageError, match="000005"):
        load_checkpoint(store.url("checkpoints/000005"))
    with pytest.raises(StorageError, match="no complete checkpoint"):
        load_checkpoint(store.url("elsewhere"))


def test_retention_keeps_newest_complete_and_in_progress(store: LocalStore) -> None:
    for i in range(1, 6):
        write_checkpoint(store, i, state(i), timesteps=i)
    store.put_bytes("checkpoints/000000/model.pt", b"old partial")
    store.put_bytes("checkpoints/000009/model.pt", b"in progress")
    deleted = apply_retention(store, keep=2)
    assert sorted(deleted) == [f"checkpoints/00000{i}" for i in (0, 1, 2, 3)]
    assert [c.iteration for c in list_checkpoints(store)] == [4, 5]
    assert store.exists("checkpoints/000009/model.pt")


def test_retention_never_deletes_what_latest_names(store: LocalStore) -> None:
    for i in (1, 2, 3):
        write_checkpoint(store, i, state(i), timesteps=i, attempt=1)
    store.put_bytes(LATEST, json.dumps({"checkpoint": "000001", "iteration": 1, "attempt": 1}).encode())
    apply_retention(store, keep=1)
    assert [c.iteration for c in list_checkpoints(store)] == [1, 3]


def test_older_attempt_is_fenced(store: LocalStore) -> None:
    write_checkpoint(store, 5, state(5), timesteps=50, attempt=2)
    with pytest.raises(FencedError):
        write_checkpoint(store, 9, state(9), timesteps=90, attempt=1)
    assert latest_checkpoint(store).iteration == 5
    assert not store.exists("checkpoints/000009/manifest.json")
    # A newer attempt may move `latest`, even to an older iteration (it resumed from there).
    write_checkpoint(store, 3, state(3), timesteps=30, attempt=3)
    assert latest_checkpoint(store).iteration == 3


def test_rewrite_of_a_crashed_iteration_removes_the_stale_manifest_first(store: LocalStore) -> None:
    write_checkpoint(store, 2, state(2), timesteps=20)
    write_checkpoint(store, 2, state(7), timesteps=21)
    files, info = restore_latest(store)
    assert files == state(7) and info.timesteps == 21


HANG_GUARD_SECONDS = 30.0  # only a hang guard: each wait below ends on an event, in milliseconds when all is well


class GatedStore(LocalStore):
    """A local store whose puts wait while `gate` is closed and can be made to fail."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.gate.set()
        self.failing = threading.Event()
        self.concurrent = 0
        self.in_flight: list[str] = []
        self.max_checkpoints_at_once = 0
        self.model_puts: list[str] = []
        self._lock = threading.Lock()

    def put_bytes(self, key: str, data: bytes) -> None:
        checkpoint = key.split("/")[1] if key.count("/") == 2 else None
        with self._lock:
            self.concurrent += 1
            if checkpoint:
                self.in_flight.append(checkpoint)
                self.max_checkpoints_at_once = max(self.max_checkpoints_at_once, len(set(self.in_flight)))
        try:
            self.gate.wait(HANG_GUARD_SECONDS)
            if self.failing.is_set():
                raise OSError("store unavailable")
            if key.endswith("model.pt"):
                self.model_puts.append(key)
            super().put_bytes(key, data)
        finally:
            with self._lock:
                self.concurrent -= 1
                if checkpoint:
                    self.in_flight.remove(checkpoint)


class ManualClock:
    """A clock that moves only when the test moves it; counts its reads (the writer reads it on every wake)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_writer_does_not_block_and_coalesces(tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    store.gate.clear()  # checkpoint 1's put hangs until the test opens the gate
    writer = CheckpointWriter(store, keep=10)
    assert writer.submit(1, state(1), timesteps=10)
    wait_for(lambda: store.concurrent, HANG_GUARD_SECONDS, "checkpoint 1's put to start")
    for i in range(2, 6):
        assert writer.submit(i, state(i), timesteps=i * 10)
    # submit returned while checkpoint 1's put was still held: it never waits for a put
    assert set(store.in_flight) == {"000001"} and not store.model_puts
    store.gate.set()
    last = writer.wait(timeout=10)
    writer.close()
    assert last is not None and last.iteration == 5
    assert store.max_checkpoints_at_once == 1  # never two checkpoints written at once
    written = sorted({k.split("/")[1] for k in store.model_puts})
    assert written == ["000001", "000005"]  # 2..4 were replaced by 5 while 1 was in flight
    assert len(store.model_puts) == len(written)  # never the same checkpoint twice
    assert not writer.submit(5, state(5), timesteps=50)  # already written


def test_writer_retries_until_the_store_is_back(tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    store.failing.set()
    written = []
    writer = CheckpointWriter(store, keep=3, on_written=written.append, max_backoff_seconds=0.2)
    writer.submit(1, state(1), timesteps=10)
    wait_for(lambda: writer.failures >= 1, HANG_GUARD_SECONDS, "a failed write")
    assert writer.last is None
    store.failing.clear()
    assert writer.wait(timeout=10).iteration == 1
    assert [c.iteration for c in written] == [1]
    assert latest_checkpoint(store).iteration == 1
    writer.close()


def test_writer_from_older_attempt_stops_after_fencing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    write_checkpoint(store, 10, state(10), timesteps=100, attempt=4)
    writer = CheckpointWriter(store, keep=3, attempt=3)
    writer.submit(11, state(11), timesteps=110)
    writer.wait(timeout=10)
    assert writer.fenced and isinstance(writer.last_error, FencedError)
    assert not writer.submit(12, state(12), timesteps=120)
    writer.close()
    assert latest_checkpoint(store).iteration == 10


def test_writer_applies_retention(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    writer = CheckpointWriter(store, keep=2)
    for i in range(1, 5):
        writer.submit(i, state(i), timesteps=i)
        writer.wait(timeout=10)
    writer.close()
    assert [c.iteration for c in list_checkpoints(store)] == [3, 4]


def test_new_checkpoints_during_an_outage_do_not_cut_the_backoff_short(tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    store.failing.set()
    clock = ManualClock()  # backoffs of at most 1 s on this clock, which moves only below
    writer = CheckpointWriter(store, keep=3, max_backoff_seconds=1.0, clock=clock)
    writer.submit(1, state(1), timesteps=1)
    wait_for(lambda: writer.failures == 1, HANG_GUARD_SECONDS, "the first failed write")
    for i in range(2, 301):  # a fast training loop submits while the writer backs off
        writer.submit(i, state(i), timesteps=i)
    reads = clock.reads
    wait_for(lambda: clock.reads > reads or writer.failures > 1, HANG_GUARD_SECONDS, "the writer to wake")
    assert writer.failures == 1  # the submits woke it; its backoff was not over, so it did not try again
    clock.now = 1.0  # past the first backoff: one more attempt, of the newest checkpoint
    wait_for(lambda: writer.failures == 2, HANG_GUARD_SECONDS, "the second failed write")
    store.failing.clear()
    clock.now = 2.0  # past the second backoff
    assert writer.wait(timeout=HANG_GUARD_SECONDS).iteration == 300  # the newest state is the one written
    assert writer.failures == 2 and store.model_puts == ["checkpoints/000300/model.pt"]
    writer.close()


def test_best_is_never_deleted_by_retention_while_it_is_best(store: LocalStore) -> None:
    for i in (1, 2):
        write_checkpoint(store, i, state(i), timesteps=i)
    write_best(store, 1, state(1), timesteps=1, score=50.0)  # already there: only the pointer is written
    for i in (3, 4, 5):
        write_checkpoint(store, i, state(i), timesteps=i)
        apply_retention(store, keep=1)
    assert [c.iteration for c in list_checkpoints(store)] == [1, 5]
    assert read_best_pointer(store)["iteration"] == 1 and read_best_pointer(store)["evaluationReturnMean"] == 50.0
    # A better one moves the pointer; the old best is an ordinary old checkpoint again.
    write_best(store, 5, state(5), timesteps=5, score=80.0)
    apply_retention(store, keep=1)
    assert [c.iteration for c in list_checkpoints(store)] == [5]
    assert json.loads(store.get_bytes(BEST))["checkpoint"] == "000005"


def test_best_rewrites_a_checkpoint_retention_removed_without_moving_latest(store: LocalStore) -> None:
    for i in (1, 2, 3):
        write_checkpoint(store, i, state(i), timesteps=i)
        apply_retention(store, keep=1)
    assert [c.iteration for c in list_checkpoints(store)] == [3]
    info = write_best(store, 2, state(2), timesteps=2, score=9.0)  # its evaluation finished late
    assert info.iteration == 2 and read_checkpoint(store, info) == state(2)
    assert json.loads(store.get_bytes(LATEST))["checkpoint"] == "000003"
    assert latest_checkpoint(store).iteration == 3


def test_the_writer_marks_the_newest_best_in_the_background(store: LocalStore) -> None:
    writer = CheckpointWriter(store, keep=1)
    for i in (1, 2, 3):
        writer.submit(i, state(i), timesteps=i)
        writer.wait(timeout=10)
    writer.submit_best(1, state(1), timesteps=1, score=3.0)
    writer.wait(timeout=10)
    writer.close()
    assert writer.best is not None and writer.best.iteration == 1
    assert {c.iteration for c in list_checkpoints(store)} == {1, 3}
