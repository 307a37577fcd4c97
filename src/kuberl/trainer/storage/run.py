"""A run's layout under its root: the spec, results.jsonl, checkpoints and traces."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from typing import Any

import yaml

from kuberl.trainer.storage.base import NotFound, ObjectStore, StorageError, retry_delay
from kuberl.trainer.storage.checkpoints import LATEST, _read_latest_pointer
from kuberl.trainer.storage.jsonl import dumps_record, parse_jsonl
from kuberl.trainer.storage.traces import TraceWriter

log = logging.getLogger(__name__)

SPEC = "experiment.yaml"
RESULTS = "results.jsonl"
EXIT_FLUSH_SECONDS = 30.0


def run_root_uri(storage_uri: str | None, namespace: str | None, name: str) -> str:
    """The run's root: storage_uri/NS/NAME in a cluster, storage_uri/NAME locally,
    file://$PWD/kuberl-runs/NAME with no storage_uri."""
    if not storage_uri:
        return "file://" + os.path.join(os.path.abspath(os.getcwd()), "kuberl-runs", name)
    base = storage_uri.rstrip("/")
    return f"{base}/{namespace}/{name}" if namespace else f"{base}/{name}"


def fresh_run_root_uri(root_uri: str, now: float | None = None) -> str:
    """A new root beside `root_uri` for `kuberl train --fresh`: ROOT-YYYYmmdd-HHMMSS."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{root_uri.rstrip('/')}-{stamp}"


class RunStorage:
    """The files of one run. results.jsonl appends never block on a remote store:
    lines are kept in memory and a background thread rewrites the object."""

    def __init__(self, store: ObjectStore, *, flush_seconds: float = 2.0, attempt: int | None = None) -> None:
        self.store = store
        # With an attempt, a rewrite of results.jsonl first checks that no newer attempt
        # owns the run (`latest`), so a zombie head cannot clobber its successor's results.
        self.attempt = attempt
        self.fenced = False
        self.uri = store.uri
        self._appendable = callable(getattr(store, "append_bytes", None))
        self._flush_seconds = flush_seconds
        # results.jsonl = _base (what the store held, loaded lazily) + _appended (this process's lines);
        # appends never wait for the load, so they work while the store is down.
        self._base: list[str] | None = None
        self._appended: list[str] = []
        self._version = 0  # bumped by every change to the lines
        self._flushed = 0  # the version results.jsonl holds
        self._waiters = 0
        self._tail_checked = False
        self._closed = False
        self._cond = threading.Condition()
        # Appendable stores: lines the store refused so far (a full disk), in order.
        self._unappended: list[str] = []
        self._append_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last_error: Exception | None = None

    # -- the spec ------------------------------------------------------------------------------------
    def write_spec(self, text: str) -> None:
        self.store.put_bytes(SPEC, text.encode())

    def read_spec(self) -> str | None:
        try:
            return self.store.get_bytes(SPEC).decode()
        except NotFound:
            return None

    def resume_conflicts(self, spec: dict[str, Any]) -> list[str]:
        """Why this run cannot resume with `spec` (a manifest dict): other algorithm or env id."""
        old_text = self.read_spec()
        if old_text is None:
            return []
        try:
            old = (yaml.safe_load(old_text) or {}).get("spec") or {}
        except yaml.YAMLError:
            return []
        new = spec.get("spec") or {}
        problems = []
        for path, old_value, new_value in (
            ("spec.algorithm", old.get("algorithm"), new.get("algorithm")),
            ("spec.env.id", (old.get("env") or {}).get("id"), (new.get("env") or {}).get("id")),
        ):
            if old_value is not None and new_value is not None and old_value != new_value:
                problems.append(
                    f"{path}: the run at {self.uri} was trained with {old_value!r}, not {new_value!r}; "
                    "it cannot resume (use --fresh or another storage.uri)"
                )
        return problems

    def has_checkpoints(self) -> bool:
        return self.store.exists(LATEST) or bool(self.store.list("checkpoints/"))

    def next_attempt(self) -> int:
        """One more than the attempt that wrote `latest` (0 for a new run): for local resumes,
        so that fencing treats the rerun as the newest writer."""
        pointer = _read_latest_pointer(self.store)
        return 0 if pointer is None else pointer["attempt"] + 1

    # -- results.jsonl -------------------------------------------------------------------------------
    def read_results(self) -> list[dict[str, Any]]:
        with self._cond:
            if self._base is not None:
                return parse_jsonl("\n".join(self._base + self._appended).encode())
        if self._appendable:
            with self._cond:
                unappended = "\n".join(self._unappended).encode()
            try:
                return parse_jsonl(self.store.get_bytes(RESULTS)) + parse_jsonl(unappended)
            except NotFound:
                return parse_jsonl(unappended)
        base = self._load_base()
        with self._cond:
            if self._base is None:
                self._base = base
            return parse_jsonl("\n".join(self._base + self._appended).encode())

    def append_result(self, result: dict[str, Any]) -> None:
        line = dumps_record(result)
        if self._appendable:
            with self._cond:
                self._unappended.append(line)
            self._append_pending()
            return
        with self._cond:
            if self.fenced:
                return
            self._appended.append(line)
            self._version += 1
            self._ensure_thread()
            self._cond.notify_all()

    def truncate_results(self, after_iteration: int) -> int:
        """Drop result lines with iteration > after_iteration (a resume from an older checkpoint),
        so timesteps never go backwards. Returns how many lines were dropped."""
        kept, dropped = [], 0
        for record in self.read_results():
            if int(record.get("iteration", 0)) > after_iteration:
                dropped += 1
            else:
                kept.append(dumps_record(record))
        if not dropped:
            return 0
        if self._appendable:
            self.store.put_bytes(RESULTS, "".join(line + "\n" for line in kept).encode())
            with self._cond:
                self._unappended.clear()  # what was kept of them is in the object now
            return dropped
        with self._cond:
            self._base, self._appended = kept, []
            self._version += 1
            self._ensure_thread()
            self._cond.notify_all()
        self.flush()
        return dropped

    def _append_pending(self) -> bool:
        """Append the lines the store has not taken yet; False while it refuses them (a full disk):
        they stay in memory and go with the next append or flush, so training never stops for it."""
        with self._append_lock:
            with self._cond:
                lines = list(self._unappended)
            if not lines:
                return True
            try:
                prefix = "" if self._tail_checked else self._torn_tail_fix()
                self.store.append_bytes(RESULTS, (prefix + "".join(ln + "\n" for ln in lines)).encode())  # type: ignore[attr-defined]
            except StorageError as e:
                if self.last_error is None:
                    log.warning("%s; %d result line(s) kept in memory until it can be written", e, len(lines))
                self.last_error = e
                return False
            self._tail_checked = True
            with self._cond:
                del self._unappended[: len(lines)]
            if self.last_error is not None:
                log.warning("%s: written again, %d kept line(s) included", self.store.url(RESULTS), len(lines))
            self.last_error = None
            return True

    def _newer_attempt_owns_run(self) -> bool:
        if self.attempt is None:
            return False
        pointer = _read_latest_pointer(self.store)
        return pointer is not None and pointer["attempt"] > self.attempt

    def _torn_tail_fix(self) -> str:
        # A crash mid-append leaves a line without its newline; start on a fresh line
        # so the torn one stays the only casualty.
        try:
            data = self.store.get_bytes(RESULTS)
        except NotFound:
            return ""
        return "\n" if data and not data.endswith(b"\n") else ""

    def _load_base(self) -> list[str]:
        try:
            data = self.store.get_bytes(RESULTS)
        except NotFound:
            data = b""
        return [dumps_record(r) for r in parse_jsonl(data)]

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._flush_loop, name="kuberl-results", daemon=True)
            self._thread.start()
            # The flusher is a daemon thread: make sure a process that exits without close()
            # still writes its last results (bounded, so a dead store cannot hang the exit).
            ref = weakref.ref(self)
            atexit.register(lambda: (run := ref()) is not None and run.close(timeout=EXIT_FLUSH_SECONDS))

    def _flush_loop(self) -> None:
        failures = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._version > self._flushed or self._closed)
                if self._version == self._flushed:
                    return  # closed with nothing left to write
                base = self._base
            try:
                if base is None:
                    base = self._load_base()
                    with self._cond:
                        if self._base is None:
                            self._base = base
                with self._cond:
                    version, lines = self._version, self._base + self._appended
                if self._newer_attempt_owns_run():
                    log.error("%s: a newer attempt owns this run; attempt %s stops writing results",
                              self.store.url(RESULTS), self.attempt)
                    with self._cond:
                        self.fenced = True
                        self._flushed = self._version  # nothing more will be written: release waiters
                        self._cond.notify_all()
                    return
                self.store.put_bytes(RESULTS, "".join(line + "\n" for line in lines).encode())
            except Exception as e:  # noqa: BLE001 - retried; the lines stay in memory
                failures += 1
                self.last_error = e
                log.warning("%s: write failed (%s); will retry", self.store.url(RESULTS), e)
                with self._cond:
                    if self._closed:
                        return
                    # Appends notify the condition; only a close may cut the backoff short.
                    self._cond.wait_for(lambda: self._closed, timeout=retry_delay(failures))
                continue
            failures, self.last_error = 0, None
            with self._cond:
                self._flushed = version
                self._cond.notify_all()
                # Coalesce appends: at most one rewrite per flush_seconds, unless someone waits.
                self._cond.wait_for(lambda: self._closed or self._waiters > 0, timeout=self._flush_seconds)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until results.jsonl holds every appended line; False on timeout."""
        if self._appendable:
            return self._append_pending()
        with self._cond:
            self._waiters += 1
            self._cond.notify_all()
            try:
                done = self._cond.wait_for(lambda: self._flushed >= self._version or self.fenced, timeout=timeout)
                return done and not self.fenced
            finally:
                self._waiters -= 1

    def close(self, timeout: float | None = 30.0) -> None:
        if self._closed:
            return
        if not self.flush(timeout) and self._unappended:
            log.error("%s: %d result line(s) could not be written (%s)", self.store.url(RESULTS),
                      len(self._unappended), self.last_error)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- traces --------------------------------------------------------------------------------------
    def trace_writer(self, worker: str, **options: Any) -> TraceWriter:
        return TraceWriter(self.store, worker, **options)
