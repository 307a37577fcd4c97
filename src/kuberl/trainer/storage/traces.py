"""Episode traces: buffered gzip JSON Lines chunks, traces/episodes-WORKER-SEQ.jsonl.gz.

`TraceWriter.write` only appends a line to memory; the background writer gzips and
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kuberl.trainer.storage.background import BackgroundWriter
from kuberl.trainer.storage.base import ObjectStore
from kuberl.trainer.storage.jsonl import dumps_record, parse_jsonl

if TYPE_CHECKING:
    from kuberl.trainer.sampling.episode_records import EpisodeRecord

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


@dataclass(frozen=True)
class _Chunk:
    """Records taken from the buffer for one upload: raw lines until a sequence number is taken, then gzip."""

    body: bytes
    records: int
    seq: int | None = None


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
        self._lines: deque[str] = deque()
        self._buffered_bytes = 0
        self._unsent: _Chunk | None = None  # taken from the buffer, not uploaded yet
        self._next_seq: int | None = None
        self._flush_requests = 0
        self._closed = False
        self._oldest_at = time.monotonic()  # when the oldest buffered line was written
        self._lock = threading.Lock()
        self._writer = BackgroundWriter(f"kuberl-traces-{self.worker}")
        # A daemon thread dies with the process: flush what is buffered at exit (bounded wait).
        ref = weakref.ref(self)
        atexit.register(lambda: (writer := ref()) is not None and writer.close(timeout=EXIT_FLUSH_SECONDS))

    @property
    def last_error(self) -> Exception | None:
        return self._writer.last_error

    def write(self, record: EpisodeRecord) -> None:
        """Buffer one record; never touches the store."""
        line = dumps_record(record)
        with self._lock:
            if self._closed:
                raise RuntimeError("TraceWriter is closed")
            was_empty = not self._lines
            if was_empty:
                self._oldest_at = time.monotonic()
            self._lines.append(line)
            self._buffered_bytes += len(line) + 1
            while self._buffered_bytes > self.max_buffer_bytes and len(self._lines) > 1:
                self._buffered_bytes -= len(self._lines.popleft()) + 1
                self.dropped += 1
            if was_empty or self._buffered_bytes >= self.max_bytes:
                self._schedule()

    @property
    def pending(self) -> int:
        """Records buffered or waiting for upload."""
        with self._lock:
            return len(self._lines) + (self._unsent.records if self._unsent else 0)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Upload everything buffered so far; False when the store did not take it within `timeout`."""
        with self._lock:
            self._flush_requests += 1  # records written meanwhile go at once too
        try:
            self._writer.hurry()
            return self._writer.wait(timeout)
        finally:
            with self._lock:
                self._flush_requests -= 1

    def close(self, timeout: float | None = 30.0) -> bool:
        """Flush, then stop the background thread; False when records were left unsent."""
        if self._closed:
            return self.pending == 0
        done = self.flush(timeout)
        with self._lock:
            self._closed = True
        self._writer.close(timeout=0)
        return done

    def _schedule(self) -> None:
        """Queue the upload of the buffer (holding the lock): at once when it is due, else when its oldest
        line is max_seconds old. The writer keeps one upload waiting; the earlier time wins."""
        due_now = self._closed or self._flush_requests > 0 or self._buffered_bytes >= self.max_bytes
        delay = 0.0 if due_now else max(0.0, self._oldest_at + self.max_seconds - time.monotonic())
        self._writer.submit(f"traces of worker {self.worker}", self._upload, key=TRACES, delay=delay)

    def _upload(self) -> None:
        """The job: upload the unsent chunk, else take the buffer as one (the writer retries it)."""
        with self._lock:
            if self._unsent is None:
                if not self._lines:
                    return
                body = "".join(line + "\n" for line in self._lines).encode()
                self._unsent = _Chunk(body, len(self._lines))
                self._lines.clear()
                self._buffered_bytes = 0
            chunk = self._unsent
        seq = chunk.seq
        if seq is None:
            packed = gzip.compress(chunk.body, compresslevel=6)
            seq = self._take_seq()
            chunk = _Chunk(packed, chunk.records, seq)
            with self._lock:
                self._unsent = chunk
        self.store.put_bytes(chunk_key(self.worker, seq), chunk.body)
        with self._lock:
            self._unsent = None
            self.records_written += chunk.records
            self.chunks_written += 1
            if self._lines:  # written during the upload, or left when this job replaced a failed one
                self._schedule()

    def _take_seq(self) -> int:
        # Continue after the chunks an earlier attempt of the run left for this worker.
        if self._next_seq is None:
            existing = list_chunks(self.store, self.worker)
            self._next_seq = existing[-1][1] + 1 if existing else 0
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        return seq
