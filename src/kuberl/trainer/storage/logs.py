"""The trainer's console output in the run's storage, so that it outlives the pods.

Layout: `logs/attempt-N/SEQ.log`, chunks of at most about `chunk_bytes` each (cut at a line end where
one is near), the newest `keep` chunks of each attempt kept. The chunk being filled is written again
(the whole chunk: S3 cannot append) at most every `flush_seconds`, and once it is full; every write is
a job of a BackgroundWriter, so a slow store never holds up the process whose output this is. Chunks
wait in memory until the store is known (`attach`), and at most `keep` of them ever wait.

`read_log` puts an attempt's chunks back together (`kuberl logs`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kuberl.trainer.storage.background import BackgroundWriter
from kuberl.trainer.storage.base import ObjectStore
from kuberl.trainer.storage.errors import NotFound

LOGS_PREFIX = "logs/"
CHUNK_BYTES = 1 << 20
KEEP_CHUNKS = 16  # per attempt: 16 MiB of the newest output by default
FLUSH_SECONDS = 10.0
_CHUNK_KEY = re.compile(r"^logs/attempt-(\d+)/(\d+)\.log$")


def chunk_key(attempt: int, seq: int) -> str:
    return f"{LOGS_PREFIX}attempt-{attempt}/{seq:06d}.log"


def parse_chunk_key(key: str) -> tuple[int, int] | None:
    """(attempt, seq) of a chunk's key; None for any other key."""
    match = _CHUNK_KEY.match(key)
    return (int(match[1]), int(match[2])) if match else None


def chunks_beyond(keys: list[str], attempt: int, newest: int, keep: int) -> list[str]:
    """The chunk keys of `attempt` that retention removes once chunk `newest` exists."""
    dropped = []
    for key in keys:
        parsed = parse_chunk_key(key)
        if parsed is not None and parsed[0] == attempt and parsed[1] <= newest - keep:
            dropped.append(key)
    return dropped


def split_chunk(buffer: bytes, chunk_bytes: int) -> tuple[bytes, bytes]:
    """(full chunk, rest) of a buffer holding at least `chunk_bytes`: cut after the last line end in
    the second half of the chunk, else at `chunk_bytes` (a line that long is cut)."""
    cut = buffer.rfind(b"\n", chunk_bytes // 2, chunk_bytes)
    end = cut + 1 if cut >= 0 else chunk_bytes
    return buffer[:end], buffer[end:]


def log_attempts(store: ObjectStore) -> list[int]:
    """The attempts that left output in the run's storage, oldest first."""
    return sorted({parsed[0] for key in store.list(LOGS_PREFIX) if (parsed := parse_chunk_key(key))})


@dataclass(frozen=True)
class StoredLog:
    attempt: int
    text: str
    chunks: int
    first_chunk: int  # above 0 when retention removed older chunks


def read_log(store: ObjectStore, attempt: int | None = None) -> StoredLog | None:
    """An attempt's output (the newest attempt's by default); None when there is none."""
    keys = store.list(LOGS_PREFIX)
    chunks = sorted(p for key in keys if (p := parse_chunk_key(key)))
    if attempt is None:
        if not chunks:
            return None
        attempt = chunks[-1][0]
    seqs = [seq for a, seq in chunks if a == attempt]
    if not seqs:
        return None
    parts = []
    for seq in seqs:
        try:
            parts.append(store.get_bytes(chunk_key(attempt, seq)))
        except NotFound:  # removed by retention while we read
            continue
    return StoredLog(attempt, b"".join(parts).decode("utf-8", errors="replace"), len(seqs), seqs[0])


class LogChunks:
    """Bytes in, chunks out. `write` may be called from any thread; it never waits on the store."""

    def __init__(self, *, chunk_bytes: int = CHUNK_BYTES, keep: int = KEEP_CHUNKS,
                 flush_seconds: float = FLUSH_SECONDS) -> None:
        if chunk_bytes < 2 or keep < 1:
            raise ValueError("chunk_bytes must be >= 2 and keep >= 1")
        self.chunk_bytes = chunk_bytes
        self.keep = keep
        self.flush_seconds = flush_seconds
        self._lock = threading.Lock()
        self._current = bytearray()
        self._seq = 0
        self._sealed: dict[int, bytes] = {}  # full chunks not yet written (at most `keep`)
        self._store: ObjectStore | None = None
        self._attempt = 0
        self._writer: BackgroundWriter | None = None
        self._own_writer = False
        self.dropped_chunks = 0  # full chunks that never reached the store (retention took them first)

    @property
    def attached(self) -> bool:
        return self._store is not None

    def attach(self, store: ObjectStore, attempt: int, writer: BackgroundWriter | None = None) -> None:
        """Where the chunks go from now on; what waited in memory is written at once."""
        with self._lock:
            if self._store is not None:
                return
            self._store, self._attempt = store, attempt
            self._writer = writer or BackgroundWriter("kuberl-logs")
            self._own_writer = writer is None
            waiting = sorted(self._sealed)
            has_current = bool(self._current)
        for seq in waiting:
            self._submit(seq, delay=0.0)
        if has_current:
            self._submit(self._seq, delay=self.flush_seconds)

    def write(self, data: bytes) -> None:
        if not data:
            return
        sealed: list[int] = []
        with self._lock:
            was_empty = not self._current
            self._current += data
            while len(self._current) >= self.chunk_bytes:
                chunk, rest = split_chunk(bytes(self._current), self.chunk_bytes)
                self._seal(chunk)
                sealed.append(self._seq - 1)
                self._current = bytearray(rest)
            seq, pending = self._seq, bool(self._current)
        for done in sealed:
            self._submit(done, delay=0.0)
        if pending and (was_empty or sealed):  # the first bytes of a chunk start its flush timer
            self._submit(seq, delay=self.flush_seconds)

    def flush(self) -> None:
        """Write the chunk being filled now (and any full one waiting)."""
        with self._lock:
            seq, pending = self._seq, bool(self._current)
        if pending:
            self._submit(seq, delay=0.0)
        if self._writer is not None:
            self._writer.hurry()

    def close(self, timeout: float = 10.0) -> bool:
        """Write everything (up to `timeout`); False when some output could not be written."""
        self.flush()
        if self._writer is None:
            return False
        if self._own_writer:
            return self._writer.close(timeout)
        return self._writer.wait(timeout)

    # -- holding the lock ----------------------------------------------------------------------------
    def _seal(self, chunk: bytes) -> None:
        self._sealed[self._seq] = chunk
        self._seq += 1
        for old in [s for s in self._sealed if s <= self._seq - 1 - self.keep]:
            del self._sealed[old]  # beyond retention before the store took it
            self.dropped_chunks += 1

    # -- the writer's jobs ---------------------------------------------------------------------------
    def _submit(self, seq: int, *, delay: float) -> None:
        if self._writer is None:
            return
        key = chunk_key(self._attempt, seq)
        self._writer.submit(key, self._job(seq), key=key, delay=delay)

    def _job(self, seq: int) -> Callable[[], None]:
        def run() -> None:
            with self._lock:
                store = self._store
                if seq in self._sealed:
                    data, full = self._sealed[seq], True
                elif seq == self._seq:
                    data, full = bytes(self._current), False
                else:  # written already, or dropped by retention
                    return
            assert store is not None
            key = chunk_key(self._attempt, seq)
            if data:
                store.put_bytes(key, data)
            if full:
                with self._lock:
                    self._sealed.pop(seq, None)
                for old in chunks_beyond(store.list(f"{LOGS_PREFIX}attempt-{self._attempt}/"), self._attempt,
                                         seq, self.keep):
                    store.delete(old)

        return run
