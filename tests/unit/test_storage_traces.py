"""TraceWriter: buffered gzip chunks, flushed by size, time and close, never blocking the caller."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.run import RunStorage
from kuberl.trainer.storage.traces import TraceWriter, list_chunks, read_traces


def episode(i: int, worker: str = "w1") -> dict:
    return {"experiment": "cp", "worker": worker, "episode": i, "env": "CartPole-v1", "return": float(i),
            "length": i, "policyVersion": 1, "startTime": 1.0, "endTime": 2.0}


def test_close_flushes_and_round_trips(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    writer = RunStorage(store).trace_writer("w1")
    for i in range(10):
        writer.write(episode(i))
    assert store.list("traces/") == []  # still buffered
    assert writer.close(timeout=5)
    assert store.list("traces/") == ["traces/episodes-w1-000000.jsonl.gz"]
    lines = gzip.decompress(store.get_bytes("traces/episodes-w1-000000.jsonl.gz")).decode().splitlines()
    assert [json.loads(line)["episode"] for line in lines] == list(range(10))
    assert list(read_traces(store)) == [episode(i) for i in range(10)]


def test_flush_by_size_and_by_time(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    by_size = TraceWriter(store, "a", max_bytes=500, max_seconds=3600)
    for batch in range(2):
        for i in range(10):
            by_size.write(episode(batch * 10 + i, "a"))
        deadline = time.monotonic() + 30  # a hang guard
        while len(list_chunks(store, "a")) <= batch and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(list_chunks(store, "a")) == batch + 1
    by_size.close()
    by_time = TraceWriter(store, "b", max_bytes=1 << 20, max_seconds=0.2)
    by_time.write(episode(1, "b"))
    deadline = time.monotonic() + 30  # a hang guard
    while not list_chunks(store, "b") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(list_chunks(store, "b")) == 1
    by_time.close()
    assert sorted(r["episode"] for r in read_traces(store, "a")) == list(range(20))


def test_new_writer_continues_sequence_of_earlier_attempt(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for attempt in range(2):
        writer = TraceWriter(store, "worker/3")
        writer.write(episode(attempt))
        writer.close()
    assert [(w, s) for w, s, _ in list_chunks(store)] == [("worker_3", 0), ("worker_3", 1)]


class BlockingStore(LocalStore):
    """Puts wait until the test opens `gate` (60 s at most: a hang guard, then the store is unavailable)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.puts_returned = 0

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            if not self.gate.wait(timeout=60):
                raise OSError("store unavailable")
            super().put_bytes(key, data)
        finally:
            self.puts_returned += 1


def test_write_never_waits_for_a_stuck_store(tmp_path: Path) -> None:
    store = BlockingStore(tmp_path)
    writer = TraceWriter(store, "w", max_bytes=200, max_seconds=0.01)
    for i in range(2000):
        writer.write(episode(i, "w"))
    assert store.puts_returned == 0  # every write returned while no put could: none waited for the store
    assert writer.pending == 2000
    store.gate.set()
    assert writer.close(timeout=10)
    assert writer.records_written == 2000 and writer.dropped == 0
    assert [r["episode"] for r in read_traces(store)] == list(range(2000))


def test_buffer_is_bounded_while_the_store_is_down(tmp_path: Path) -> None:
    store = BlockingStore(tmp_path)
    writer = TraceWriter(store, "w", max_bytes=1 << 20, max_seconds=3600, max_buffer_bytes=2000)
    for i in range(100):
        writer.write(episode(i, "w"))
    assert writer.dropped > 0
    store.gate.set()
    writer.close(timeout=10)
    episodes = [r["episode"] for r in read_traces(store)]
    assert episodes == list(range(100 - len(episodes), 100))  # the newest survive


def test_unreadable_chunk_is_skipped(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    writer = TraceWriter(store, "w")
    writer.write(episode(1, "w"))
    writer.close()
    store.put_bytes("traces/episodes-w-000001.jsonl.gz", b"not gzip")
    assert [r["episode"] for r in read_traces(store)] == [1]


def test_step_records_with_numpy_values_round_trip(tmp_path: Path) -> None:
    import numpy as np

    store = LocalStore(tmp_path)
    writer = TraceWriter(store, "w")
    steps = [{"obs": np.array([0.5, -1.0], dtype=np.float32), "action": np.int64(1), "reward": np.float32(1.0)}]
    writer.write({**episode(1, "w"), "steps": steps})
    writer.close()
    (record,) = read_traces(store)
    assert record["steps"] == [{"obs": [0.5, -1.0], "action": 1, "reward": 1.0}]
