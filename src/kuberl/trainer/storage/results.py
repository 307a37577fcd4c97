"""results.jsonl: one JSON line per training result, written so that training never waits on the store.

A store that appends in place (a local disk) takes each line at once; lines it refuses (a full disk)
wait in memory and go with the next append or flush. On a store that cannot (S3) the lines are kept
in memory and the background writer rewrites the whole object, at most once per `flush_seconds`
unless someone flushes.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
import weakref
from typing import Any, Protocol

from kuberl.trainer.storage.background import BackgroundWriter
from kuberl.trainer.storage.base import AppendableStore, ObjectStore
from kuberl.trainer.storage.checkpoints import read_latest_pointer
from kuberl.trainer.storage.errors import NotFound, StorageError
from kuberl.trainer.storage.jsonl import dumps_record, parse_jsonl

log = logging.getLogger(__name__)

RESULTS = "results.jsonl"
EXIT_FLUSH_SECONDS = 30.0


class ResultsFile(Protocol):
    attempt: int | None  # with an attempt, a rewrite first checks that no newer attempt owns the run
    fenced: bool  # a newer attempt owns the run: this process writes no more results
    last_error: Exception | None

    def read(self) -> list[dict[str, Any]]: ...
    def append(self, line: str) -> None: ...
    def replace(self, lines: list[str]) -> None: ...  # the whole file, at once
    def flush(self, timeout: float | None = 30.0) -> bool: ...
    def close(self, timeout: float | None = 30.0) -> None: ...


def open_results(store: ObjectStore, *, flush_seconds: float, attempt: int | None) -> ResultsFile:
    if isinstance(store, AppendableStore):
        return AppendedResults(store)
    return RewrittenResults(store, flush_seconds=flush_seconds, attempt=attempt)


class AppendedResults:
    """results.jsonl on a store that appends in place. A local run has one writer: no fencing."""

    def __init__(self, store: ObjectStore) -> None:
        if not isinstance(store, AppendableStore):
            raise TypeError(f"{store!r} cannot append")
        self.store = store
        self.attempt: int | None = None
        self.fenced = False
        self.last_error: Exception | None = None
        self._append_bytes = store.append_bytes
        self._unappended: list[str] = []  # lines the store refused so far (a full disk), in order
        self._tail_checked = False
        self._lock = threading.Lock()  # the lines
        self._append_lock = threading.Lock()  # one append at a time

    def read(self) -> list[dict[str, Any]]:
        with self._lock:
            unappended = "\n".join(self._unappended).encode()
        try:
            return parse_jsonl(self.store.get_bytes(RESULTS)) + parse_jsonl(unappended)
        except NotFound:
            return parse_jsonl(unappended)

    def append(self, line: str) -> None:
        with self._lock:
            self._unappended.append(line)
        self.flush()

    def replace(self, lines: list[str]) -> None:
        self.store.put_bytes(RESULTS, "".join(line + "\n" for line in lines).encode())
        with self._lock:
            self._unappended.clear()  # what was kept of them is in the object now

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Append the lines the store has not taken yet; False while it refuses them (a full disk):
        they stay in memory and go with the next append or flush, so training never stops for it."""
        with self._append_lock:
            with self._lock:
                lines = list(self._unappended)
            if not lines:
                return True
            try:
                prefix = "" if self._tail_checked else self._torn_tail_fix()
                self._append_bytes(RESULTS, (prefix + "".join(ln + "\n" for ln in lines)).encode())
            except StorageError as e:
                if self.last_error is None:
                    log.warning("%s; %d result line(s) kept in memory until it can be written", e, len(lines))
                self.last_error = e
                return False
            self._tail_checked = True
            with self._lock:
                del self._unappended[: len(lines)]
            if self.last_error is not None:
                log.warning("%s: written again, %d kept line(s) included", self.store.url(RESULTS), len(lines))
            self.last_error = None
            return True

    def close(self, timeout: float | None = 30.0) -> None:
        if not self.flush(timeout) and self._unappended:
            log.error("%s: %d result line(s) could not be written (%s)", self.store.url(RESULTS),
                      len(self._unappended), self.last_error)

    def _torn_tail_fix(self) -> str:
        # A crash mid-append leaves a line without its newline; start on a fresh line
        # so the torn one stays the only casualty.
        try:
            data = self.store.get_bytes(RESULTS)
        except NotFound:
            return ""
        return "\n" if data and not data.endswith(b"\n") else ""


class RewrittenResults:
    """results.jsonl on a store that cannot append: the lines in memory, the object rewritten whole in the
    background. With an attempt, a rewrite first checks that no newer attempt owns the run (`latest`),
    so a zombie head cannot clobber its successor's results."""

    def __init__(self, store: ObjectStore, *, flush_seconds: float = 2.0, attempt: int | None = None) -> None:
        self.store = store
        self.attempt = attempt
        self.fenced = False
        self.last_error: Exception | None = None
        self._flush_seconds = flush_seconds
        # results.jsonl = _base (what the store held, loaded lazily) + _appended (this process's lines);
        # appends never wait for the load, so they work while the store is down.
        self._base: list[str] | None = None
        self._appended: list[str] = []
        self._last_rewrite = -math.inf  # time.monotonic() of the last rewrite
        self._waiters = 0
        self._closed = False
        self._lock = threading.Lock()
        self._writer: BackgroundWriter | None = None  # started by the first change

    def read(self) -> list[dict[str, Any]]:
        return parse_jsonl("\n".join(self._lines()).encode())

    def append(self, line: str) -> None:
        with self._lock:
            if self.fenced:
                return
            self._appended.append(line)
            self._changed()

    def replace(self, lines: list[str]) -> None:
        with self._lock:
            self._base, self._appended = lines, []
            self._changed()
        self.flush()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until results.jsonl holds every appended line; False on timeout or once fenced."""
        with self._lock:
            writer = self._writer
            if writer is None:
                return not self.fenced
            self._waiters += 1  # appends meanwhile are written at once too
        try:
            writer.hurry()
            return writer.wait(timeout) and not self.fenced
        finally:
            with self._lock:
                self._waiters -= 1

    def close(self, timeout: float | None = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.close(timeout)

    def _changed(self) -> None:
        """Schedule a rewrite (holding the lock): at most one per flush_seconds, unless someone waits."""
        if self._writer is None:
            self._writer = BackgroundWriter("kuberl-results")
            # The writer's thread is a daemon: make sure a process that exits without close() still
            # writes its last results (bounded, so a dead store cannot hang the exit).
            ref = weakref.ref(self)

            def flush_at_exit() -> None:
                results = ref()
                if results is not None:
                    results.close(timeout=EXIT_FLUSH_SECONDS)

            atexit.register(flush_at_exit)
        delay = 0.0 if self._waiters else max(0.0, self._last_rewrite + self._flush_seconds - time.monotonic())
        self._writer.submit(self.store.url(RESULTS), self._rewrite, key=RESULTS, delay=delay)

    def _rewrite(self) -> None:
        """The job: the whole object from the lines in memory (the writer retries it; the lines stay)."""
        try:
            lines = self._lines()
            if self._newer_attempt_owns_run():
                log.error("%s: a newer attempt owns this run; attempt %s stops writing results",
                          self.store.url(RESULTS), self.attempt)
                self.fenced = True
                return
            self.store.put_bytes(RESULTS, "".join(line + "\n" for line in lines).encode())
        except Exception as e:
            self.last_error = e
            raise
        self.last_error = None
        self._last_rewrite = time.monotonic()

    def _lines(self) -> list[str]:
        """Every line of the file; what the store held is loaded once, outside the lock (it may be slow)."""
        with self._lock:
            if self._base is not None:
                return self._base + self._appended
        base = self._load_base()
        with self._lock:
            if self._base is None:
                self._base = base
            return self._base + self._appended

    def _newer_attempt_owns_run(self) -> bool:
        if self.attempt is None:
            return False
        pointer = read_latest_pointer(self.store)
        return pointer is not None and pointer.attempt > self.attempt

    def _load_base(self) -> list[str]:
        try:
            data = self.store.get_bytes(RESULTS)
        except NotFound:
            data = b""
        return [dumps_record(r) for r in parse_jsonl(data)]
