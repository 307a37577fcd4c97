"""Episode traces: buffered gzip JSON Lines chunks, traces/episodes-WORKER-SEQ.jsonl.gz.

`TraceWriter.write` only appends a line to memory; a background thread gzips and
uploads a chunk when the buffer passes `max_bytes`, every `max_seconds`, and on
close, so a rollout loop never waits on the store. While the store is down the
lines stay buffered (up to `max_buffer_bytes`; beyond that the oldest are dropped
and counted) and are uploaded once it is back.
"""

from __future__ import annotations

import atexit
import gzip
import logging
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any

from kuberl.trainer.storage.base import ObjectStore, retry_delay
from kuberl.trainer.storage.jsonl import dumps_record, parse_jsonl

log = logging.getLogger(__name__)

TRACES = "traces"
_CHUNK_RE = re.compile(r"^traces/episodes-(?P<worker>.+)-(?P<seq>\d{6,})\.jsonl\.gz$")
EXIT_FLUSH_SECONDS = 10.0
_SAFE_WORKER_RE = re.compile(r"[^A-Za-z0-9_.]+")


def worker_label(worker: str | int) -> str:
    """A worker name safe for a key: letters, digits, '_' and '.' (others become '_')."""
    return _SAFE_WORKER_RE.sub("_", str(worker)) or "0"


def chunk_key(worker: str | int, seq: int) -> str:
    return f"{TRACES}/episodes-{worker_label(worker)}-{seq:06d}.jsonl.gz"


def list_chunks(store: ObjectStore, worker: str | int | None = None) -> list[tuple[str, int, str]]:
    """(worker, seq, key) of every trace chunk, ordered by worker then seq."""
    chunks = []
    for key in store.list(f"{TRACES}/"):
        match = _CHUNK_RE.match(key)
        if match and (worker is None or match["worker"] == worker_label(worker)):
            chunks.append((match["worker"], int(match["seq"]), key))
    return sorted(chunks)


def read_traces(store: ObjectStore, worker: str | int | None = None) -> Iterator[dict[str, Any]]:
    """Every episode record of a run (or of one worker); unreadable chunks are skipped with a warning."""
    for _worker, _seq, key in list_chunks(store, worker):
        try:
            data = gzip.decompress(store.get_bytes(key))
        except (OSError, EOFError) as e:
            log.warning("%s: unreadable trace chunk skipped (%s)", store.url(key), e)
            continue
        yield from parse_jsonl(data)


class TraceWriter:
    """Buffers episode records of one worker and uploads them as gzip chunks in the background."""

    def __init__(
        self,
        store: ObjectStore,
        worker: str | int,
        *,
        max_bytes: int = 1 << 20,
        max_seconds: float = 30.0,
        max_buffer_bytes: int = 64 << 20,
    ) -> None:
        self.store = store
        self.worker = worker_label(worker)
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.max_buffer_bytes = max_buffer_bytes
        self.records_written = 0  # records in uploaded chunks
        self.chunks_written = 0
        self.dropped = 0  # records lost because the store stayed down past max_buffer_bytes
        self.last_error: Exception | None = None
        self._lines: deque[str] = deque()
        self._buffered_bytes = 0
        self._unsent: tuple[int, bytes, int] | None = None  # (seq, gzip data, record count)
        self._next_seq: int | None = None
        self._flush_requests = 0
        self._closed = False
        self._oldest_at = time.monotonic()  # when the oldest buffered line was written
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"kuberl-traces-{self.worker}", daemon=True)
        self._thread.start()
        # A daemon thread dies with the process: flush what is buffered at exit (bounded wait).
        ref = weakref.ref(self)
        atexit.register(lambda: (writer := ref()) is not None and writer.close(timeout=EXIT_FLUSH_SECONDS))

    def write(self, record: dict[str, Any]) -> None:
        """Buffer one record; never touches the store."""
        line = dumps_record(record)
        with self._cond:
            if self._closed:
                raise RuntimeError("TraceWriter is closed")
            if not self._lines:
                self._oldest_at = time.monotonic()
                self._cond.notify_all()  # the flusher starts its max_seconds clock
            self._lines.append(line)
            self._buffered_bytes += len(line) + 1
            while self._buffered_bytes > self.max_buffer_bytes and len(self._lines) > 1:
                self._buffered_bytes -= len(self._lines.popleft()) + 1
                self.dropped += 1
            if self._buffered_bytes >= self.max_bytes:
                self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Records buffered or waiting for upload."""
        with self._cond:
            return len(self._lines) + (self._unsent[2] if self._unsent else 0)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Upload everything buffered so far; False when the store did not take it within `timeout`."""
        with self._cond:
            self._flush_requests += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: not self._lines and self._unsent is None, timeout=timeout)
            finally:
                self._flush_requests -= 1

    def close(self, timeout: float | None = 30.0) -> bool:
        """Flush, then stop the background thread; False when records were left unsent."""
        if self._closed:
            return self.pending == 0
        done = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        return done

    def _due(self) -> bool:
        if self._unsent is not None:
            return True
        if not self._lines:
            return False
        return (
            self._closed
            or self._flush_requests > 0
            or self._buffered_bytes >= self.max_bytes
            or time.monotonic() - self._oldest_at >= self.max_seconds
        )

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._due():
                    if self._closed:
                        return
                    timeout = None if not self._lines else max(
                        0.0, self.max_seconds - (time.monotonic() - self._oldest_at))
                    self._cond.wait(timeout)
                if self._unsent is None:
                    lines = list(self._lines)
                    self._lines.clear()
                    self._buffered_bytes = 0
                    body = "".join(line + "\n" for line in lines).encode()
                    self._unsent = (-1, body, len(lines))
                seq, body, count = self._unsent
            try:
                if seq < 0:
                    seq = self._take_seq()
                    body = gzip.compress(body, compresslevel=6)
                    with self._cond:
                        self._unsent = (seq, body, count)
                self.store.put_bytes(chunk_key(self.worker, seq), body)
            except Exception as e:  # noqa: BLE001 - the chunk stays unsent and is retried
                failures += 1
                self.last_error = e
                log.warning("traces of worker %s: upload failed (%s); will retry", self.worker, e)
                with self._cond:
                    if self._closed and self._flush_requests == 0:
                        return
                    # New records notify the condition; only a close may cut the backoff short.
                    self._cond.wait_for(lambda: self._closed, timeout=retry_delay(failures))
                continue
            failures, self.last_error = 0, None
            with self._cond:
                self._unsent = None
                self.records_written += count
                self.chunks_written += 1
                self._cond.notify_all()

    def _take_seq(self) -> int:
        # Continue after the chunks an earlier attempt of the run left for this worker.
        if self._next_seq is None:
            existing = list_chunks(self.store, self.worker)
            self._next_seq = existing[-1][1] + 1 if existing else 0
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        return seq
