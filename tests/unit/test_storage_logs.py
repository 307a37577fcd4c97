"""The trainer's output in the run's storage: chunks of bounded size, rotated, read back in order."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kuberl.trainer.storage.background import BackgroundWriter
from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.logs import (
    LogChunks,
    chunk_key,
    chunks_beyond,
    log_attempts,
    parse_chunk_key,
    read_log,
    split_chunk,
)
from kuberl_testing.trainer_process import wait_for

pytestmark = pytest.mark.timeout(60)


def test_chunk_keys_round_trip_and_nothing_else_parses() -> None:
    assert chunk_key(2, 7) == "logs/attempt-2/000007.log"
    assert parse_chunk_key(chunk_key(2, 7)) == (2, 7)
    for other in ("logs/attempt-2/000007.log.tmp", "results.jsonl", "logs/attempt-x/000001.log", "logs/000001.log"):
        assert parse_chunk_key(other) is None


def test_retention_drops_only_the_older_chunks_of_the_same_attempt() -> None:
    keys = [chunk_key(1, s) for s in range(6)] + [chunk_key(2, s) for s in range(3)]
    assert chunks_beyond(keys, 1, newest=5, keep=3) == [chunk_key(1, s) for s in (0, 1, 2)]
    assert chunks_beyond(keys, 2, newest=2, keep=3) == []


def test_a_chunk_is_cut_after_a_line_end_when_one_is_near() -> None:
    chunk, rest = split_chunk(b"aaaa\nbbbb\ncc", 10)
    assert (chunk, rest) == (b"aaaa\nbbbb\n", b"cc")
    chunk, rest = split_chunk(b"x" * 25, 10)  # one long line: cut at the size
    assert (chunk, rest) == (b"x" * 10, b"x" * 15)


def _written(store: LocalStore, chunks: LogChunks) -> dict[int, bytes]:
    assert chunks.close(10)
    return {seq: store.get_bytes(key) for key in store.list("logs/") if (p := parse_chunk_key(key)) for seq in [p[1]]}


def test_output_comes_back_whole_in_chunks_of_bounded_size(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    chunks = LogChunks(chunk_bytes=64, keep=100, flush_seconds=60)
    chunks.attach(store, attempt=3)
    lines = [f"iteration {i}: return {i * 1.5}\n".encode() for i in range(40)]
    for line in lines:
        chunks.write(line)
    written = _written(store, chunks)
    assert len(written) > 5 and max(len(b) for b in written.values()) <= 64
    assert b"".join(written[s] for s in sorted(written)) == b"".join(lines)
    log = read_log(store)
    assert log is not None and log.attempt == 3 and log.first_chunk == 0
    assert log.text == b"".join(lines).decode()
    assert log_attempts(store) == [3]


def test_only_the_newest_chunks_are_kept(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    chunks = LogChunks(chunk_bytes=32, keep=3, flush_seconds=60)
    chunks.attach(store, attempt=1)
    for i in range(100):
        chunks.write(f"line {i:04d} of the output\n".encode())
    written = _written(store, chunks)
    assert len(written) <= 4  # `keep` full chunks and the one being filled
    text = read_log(store).text
    assert text.endswith("line 0099 of the output\n") and "line 0000" not in text
    assert read_log(store).first_chunk > 0


def test_output_before_the_store_is_known_waits_in_memory_bounded(tmp_path: Path) -> None:
    chunks = LogChunks(chunk_bytes=32, keep=2, flush_seconds=60)
    for i in range(20):
        chunks.write(f"early line {i:02d}\n".encode())
    assert chunks.dropped_chunks > 0  # at most `keep` full chunks wait
    store = LocalStore(tmp_path)
    chunks.attach(store, attempt=0)
    chunks.write(b"after attach\n")
    _written(store, chunks)
    text = read_log(store, attempt=0).text
    assert text.endswith("early line 19\nafter attach\n")
    assert "early line 00" not in text


def test_the_chunk_being_filled_is_written_after_flush_seconds_without_a_close(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    chunks = LogChunks(chunk_bytes=1 << 20, keep=4, flush_seconds=0.2)
    chunks.attach(store, attempt=0)
    chunks.write(b"first line\n")
    deadline = time.monotonic() + 30  # a hang guard
    while not store.exists(chunk_key(0, 0)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.get_bytes(chunk_key(0, 0)) == b"first line\n"
    chunks.write(b"second line\n")
    chunks.close(10)
    assert store.get_bytes(chunk_key(0, 0)) == b"first line\nsecond line\n"


class _FailingTwice:
    """A store whose puts wait until `gate` opens (60 s at most, a hang guard), and whose first two puts then
    fail (an unwell S3), then works: the writer retries."""

    def __init__(self, store: LocalStore) -> None:
        self.store, self.failures = store, 2
        self.uri = store.uri
        self.gate = threading.Event()
        self.puts_started = 0

    def put_bytes(self, key: str, data: bytes) -> None:
        self.puts_started += 1
        self.gate.wait(timeout=60)
        if self.failures:
            self.failures -= 1
            raise OSError("503 Slow Down")
        self.store.put_bytes(key, data)

    def __getattr__(self, name: str):  # noqa: ANN204 - the rest of the store as it is
        return getattr(self.store, name)


def test_a_failing_store_is_retried_and_writing_never_waits(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    writer = BackgroundWriter("test-logs", max_backoff_seconds=0.05)
    chunks = LogChunks(chunk_bytes=16, keep=10, flush_seconds=60)
    failing = _FailingTwice(store)
    chunks.attach(failing, attempt=0, writer=writer)
    for i in range(10):
        chunks.write(f"line {i}\n".encode())
    wait_for(lambda: failing.puts_started, 60, "the first chunk's put")  # a hang guard
    assert failing.failures == 2  # ten lines written while the first put was still held: writing never waits
    failing.gate.set()
    assert chunks.close(10)
    writer.close()
    assert writer.failures == 2
    assert read_log(store).text == "".join(f"line {i}\n" for i in range(10))


def test_whole_lines_hold_a_partial_line_until_its_newline() -> None:
    """print() writes a line's text and its newline apart; the other stream's line must not land between."""
    from kuberl.trainer.run.log_capture import WholeLines

    written: list[bytes] = []
    stderr, stdout = WholeLines(written.append), WholeLines(written.append)
    stderr.write(b"to stderr")
    stdout.write(b"from python\n")
    stderr.write(b"\n")
    stdout.write(b"two\nlines and a part")
    assert written == [b"from python\n", b"to stderr\n", b"two\n"]
    stdout.flush()  # the pipe's end
    assert written[-1] == b"lines and a part"
    long = WholeLines(written.append, max_pending=8)
    long.write(b"0123456789")  # no newline in sight: passed on rather than held without bound
    assert written[-1] == b"0123456789" and long.pending == b""


def test_the_tee_keeps_the_console_and_stores_stdout_and_stderr(tmp_path: Path) -> None:
    """In a process of its own (the tee swaps file descriptors 1 and 2): prints from Python, from a
    child process sharing the descriptors, and to stderr all reach both the console and the chunks."""
    script = textwrap.dedent(f"""
        import os, subprocess, sys
        from kuberl.trainer.run.log_capture import OutputCapture
        from kuberl.trainer.storage.local import LocalStore
        from kuberl.trainer.storage.logs import LogChunks

        capture = OutputCapture(LogChunks(chunk_bytes=4096, keep=4, flush_seconds=60)).start()
        print("from python", flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        subprocess.run(["echo", "from a child"], check=True)
        capture.chunks.attach(LocalStore({str(tmp_path)!r}), attempt=5)
        os.write(1, b"raw fd write\\n")
        assert capture.stop(10)
        print("after stop: console only")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["from python", "from a child", "raw fd write", "after stop: console only"]
    assert result.stderr.strip() == "to stderr"
    stored = read_log(LocalStore(tmp_path), attempt=5).text
    assert sorted(stored.splitlines()) == sorted(["from python", "to stderr", "from a child", "raw fd write"])


def test_following_prints_new_output_once_and_moves_on_to_a_new_attempt(tmp_path: Path) -> None:
    from kuberl.client.logs import follow_stored

    store = LocalStore(tmp_path)
    writer = BackgroundWriter("test-follow")
    first = LogChunks(chunk_bytes=24, keep=100, flush_seconds=60)
    first.attach(store, attempt=1, writer=writer)
    polls = []

    def done() -> bool:  # each poll, the trainer writes more: a line, then a new attempt, then it ends
        polls.append(len(polls))
        if len(polls) == 2:
            first.write(b"second line of attempt 1\n")
            first.flush()
            assert first.close(10)
        if len(polls) == 3:
            second = LogChunks(chunk_bytes=24, keep=100, flush_seconds=60)
            second.attach(store, attempt=2)
            second.write(b"attempt 2 starts\n")
            assert second.close(10)
        return len(polls) >= 4

    first.write(b"first line\n")
    first.flush()
    assert writer.wait(10)  # the line is in the store before following starts
    text = "".join(follow_stored(store, attempt=None, done=done, poll=0.01))
    writer.close()
    assert text == "first line\nsecond line of attempt 1\n--- attempt 2 ---\nattempt 2 starts\n"

