"""A background writer: jobs (uploads, result sinks) run in order in one thread, so training never
waits on a store or a tracking server; a job that raises is retried with the storage backoff
until it succeeds or the writer closes."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from kuberl.trainer.storage.base import retry_delay

log = logging.getLogger(__name__)

MAX_QUEUED_JOBS = 10_000  # waiting jobs; beyond this the oldest are dropped (and counted) while a store is down


class BackgroundWriter:
    def __init__(self, name: str = "kuberl-background", *, max_backoff_seconds: float = 10.0,
                 max_jobs: int = MAX_QUEUED_JOBS) -> None:
        self.max_backoff_seconds = max_backoff_seconds
        self.max_jobs = max_jobs
        self.dropped = 0
        self.failures = 0
        self.last_error: Exception | None = None
        self._jobs: deque[tuple[str, Callable[[], object]]] = deque()
        self._running = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, what: str, job: Callable[[], object]) -> None:
        """Queue `job`; `what` names it in warnings (such as "videos/eval-000010.mp4")."""
        with self._cond:
            if self._closed:
                return
            if len(self._jobs) >= self.max_jobs:
                dropped, _ = self._jobs.popleft()
                self.dropped += 1
                log.warning("background writer: %s dropped, %d jobs queued", dropped, len(self._jobs))
            self._jobs.append((what, job))
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every queued job ran; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._running, timeout=timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Run what is queued (up to `timeout`: a dead store must not hang the exit), then stop."""
        done = self.wait(timeout)
        with self._cond:
            if not done and self._jobs:
                log.error("background writer: %d job(s) not done at exit (%s)", len(self._jobs), self.last_error)
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._jobs or self._closed)
                if not self._jobs:
                    return
                what, job = self._jobs.popleft()
                self._running = True
            failures = 0
            while True:
                try:
                    job()
                    break
                except Exception as e:  # noqa: BLE001 - any failure is retried
                    failures += 1
                    self.failures += 1
                    self.last_error = e
                    log.warning("%s: failed (%s); retry %d", what, e, failures)
                    with self._cond:
                        if self._cond.wait_for(lambda: self._closed,
                                               timeout=retry_delay(failures, cap=self.max_backoff_seconds)):
                            break
            with self._cond:
                self._running = False
                self._cond.notify_all()
