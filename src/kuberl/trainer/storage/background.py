"""The trainer's one background writer: checkpoints, results.jsonl, trace chunks, result sinks and
uploads run as jobs in a thread of their own, so training never waits on a store or a tracking server.

A job that raises is retried with the storage backoff (by failures in a row, across jobs; new work
does not cut it short, a close does) until it succeeds or the writer closes. A job with a key
coalesces: a newer one replaces the job of that key still waiting (the newest state wins), and a
failing job gives way to it after its backoff. A job may wait `delay` seconds first, so that
writes batch up (results.jsonl, trace chunks); `hurry` lets them run now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kuberl.trainer.storage.faults import retry_delay

log = logging.getLogger(__name__)

MAX_QUEUED_JOBS = 10_000  # waiting jobs; beyond this the oldest are dropped (and counted) while a store is down
JOIN_SECONDS = 5.0  # after close: how long the exit waits for a job still running


@dataclass(eq=False)
class _Job:
    what: str  # names the job in warnings ("checkpoint 120", "videos/eval-000010.mp4")
    run: Callable[[], object]
    key: str | None  # a newer job with this key replaces this one while it waits
    due: float  # the writer's clock() from which it may run


class BackgroundWriter:
    def __init__(self, name: str = "kuberl-background", *, max_backoff_seconds: float = 10.0,
                 max_jobs: int = MAX_QUEUED_JOBS, stop_on: tuple[type[Exception], ...] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`stop_on`: errors no retry may fix (a newer attempt owns the run): one ends the writer. `clock`
        times the delays and the backoff (a test moves its own; the writer reads it again on every wake)."""
        self.name = name
        self._clock = clock
        self.max_backoff_seconds = max_backoff_seconds
        self.max_jobs = max_jobs
        self.stop_on = stop_on
        self.dropped = 0
        self.failures = 0
        self.last_error: Exception | None = None
        self.stopped_by: Exception | None = None  # the `stop_on` error that ended the writer
        self._queue: deque[_Job] = deque()
        self._waiting: dict[str, _Job] = {}  # the queued job of each key
        self._running: _Job | None = None
        self._failing = 0  # failures in a row: a newer job does not reset the backoff, a success does
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, what: str, job: Callable[[], object], *, key: str | None = None, delay: float = 0.0) -> bool:
        """Queue `job` to run after `delay` seconds; `what` names it in warnings. With a key it replaces
        the job of that key still waiting, and runs no later than that one would have. False once the
        writer is closed or stopped."""
        with self._cond:
            if self._closed or self.stopped_by is not None:
                return False
            due = self._clock() + delay
            waiting = self._waiting.get(key) if key is not None else None
            if waiting is not None:
                waiting.what, waiting.run, waiting.due = what, job, min(waiting.due, due)
            else:
                if len(self._queue) >= self.max_jobs:
                    self._drop_oldest()
                self._queue.append(_Job(what, job, key, due))
                if key is not None:
                    self._waiting[key] = self._queue[-1]
            self._cond.notify_all()
            return True

    def hurry(self) -> None:
        """Let every delayed job run now (someone waits for it)."""
        with self._cond:
            now = self._clock()
            for job in self._queue:
                job.due = min(job.due, now)
            self._cond.notify_all()

    @property
    def busy(self) -> bool:
        """Whether a job is queued or running."""
        with self._cond:
            return self._busy()

    @property
    def closed(self) -> bool:
        return self._closed

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every queued job ran (a delayed one when it is due); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy(), timeout=timeout)

    def close(self, timeout: float | None = 30.0) -> bool:
        """Run what is queued, delayed jobs at once (up to `timeout`: a dead store must not hang the
        exit), then stop; a failing job gets no more attempts. False when jobs were left undone."""
        if self._closed:
            return not self.busy
        self.hurry()
        done = self.wait(timeout)
        with self._cond:
            if not done:
                left = len(self._queue) + (self._running is not None)
                log.error("%s: %d job(s) not done at exit (%s)", self.name, left, self.last_error)
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=JOIN_SECONDS)
        return done

    # -- holding the condition -------------------------------------------------------------------------
    def _busy(self) -> bool:
        return bool(self._queue) or self._running is not None

    def _drop_oldest(self) -> None:
        dropped = self._queue.popleft()
        if dropped.key is not None:
            del self._waiting[dropped.key]
        self.dropped += 1
        log.warning("%s: %s dropped, %d jobs queued", self.name, dropped.what, len(self._queue))

    def _take(self, job: _Job) -> None:
        self._queue.remove(job)
        if job.key is not None:
            del self._waiting[job.key]
        self._running = job

    # -- on the writer's thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while (job := self._next()) is not None:
            self._run_until_done(job)
            with self._cond:
                self._running = None
                self._cond.notify_all()

    def _next(self) -> _Job | None:
        """The first queued job that is due (every one once closed); None when the writer ends."""
        with self._cond:
            while self.stopped_by is None:
                now = self._clock()
                job = next((j for j in self._queue if self._closed or j.due <= now), None)
                if job is not None:
                    self._take(job)
                    return job
                if self._closed:
                    return None
                self._cond.wait(min(j.due for j in self._queue) - now if self._queue else None)
            return None

    def _run_until_done(self, job: _Job) -> None:
        attempt: _Job | None = job
        while attempt is not None:
            try:
                attempt.run()
            except self.stop_on as e:
                self._stop(e)
                return
            except Exception as e:  # noqa: BLE001 - any failure is retried
                self._failing += 1
                self.failures += 1
                self.last_error = e
                log.warning("%s: failed (%s); retry %d", attempt.what, e, self._failing)
                attempt = self._after_backoff(attempt)
                continue
            self._failing = 0
            return

    def _after_backoff(self, job: _Job) -> _Job | None:
        """Sleep the backoff; then what to try next: the newer job of its key if one waits, else the job
        again; None once the writer closed."""
        with self._cond:
            deadline = self._clock() + retry_delay(self._failing, cap=self.max_backoff_seconds)
            while not self._closed and (left := deadline - self._clock()) > 0:
                self._cond.wait(left)  # a submit wakes it too: the backoff goes on until the deadline
            if self._closed:
                return None
            newer = self._waiting.get(job.key) if job.key is not None else None
            if newer is None:
                return job
            self._take(newer)
            return newer

    def _stop(self, error: Exception) -> None:
        log.error("%s", error)
        with self._cond:
            self.stopped_by = self.last_error = error
            self._queue.clear()
            self._waiting.clear()
            self._cond.notify_all()
