"""What the MLflow and W&B sinks share: every call on the sink's own background thread, a problem noted
once, and the rule that a tracker never stops training.

A job that fails is retried by the BackgroundWriter with the storage backoff while results wait (bounded).
What no retry fixes (no client package, a refused login or API key) turns the sink off. The current
problem is kept in `problem`, which the driver copies into results.jsonl and /status (the operator's
TrackingDegraded condition).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from kuberl.trainer.storage.background import BackgroundWriter
from kuberl.trainer.storage.base import NotFound, ObjectStore

log = logging.getLogger(__name__)

MAX_QUEUED = 5000


class TrackerDisabled(Exception):
    """The sink cannot log at all (no client package, a refused login or API key)."""


class TrackerSink:
    """A tracker's background thread and its problem; subclasses say how they start and what is refused."""

    name = "tracker"  # as the warnings say it

    def __init__(self, store: ObjectStore, run_id_key: str, thread_name: str) -> None:
        self.store = store
        self.run_id_key = run_id_key
        self.problem: str | None = None
        self.disabled = False
        self._worker = BackgroundWriter(thread_name, max_jobs=MAX_QUEUED)

    # -- for subclasses ------------------------------------------------------------------------------
    def started(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        """Start (or continue) the tracker's run; raises TrackerDisabled when it never can."""
        raise NotImplementedError

    def refusal(self, error: BaseException) -> str | None:
        """The problem when `error` is a refusal no retry fixes, else None."""
        return None

    def unavailable(self, error: BaseException) -> str:
        return f"{self.name} is unavailable ({type(error).__name__}: {str(error)[:300]}); results wait and are retried"

    # -- shared --------------------------------------------------------------------------------------
    def submit(self, what: str, job: Callable[[], None]) -> None:
        self._worker.submit(what, self._guarded(job))

    def _guarded(self, job: Callable[[], None]) -> Callable[[], None]:
        """The job, or nothing once the sink is off; a failure is noted once, then raised to be retried."""
        def run() -> None:
            if self.disabled:
                return
            try:
                if not self.started():
                    self.start()
                job()
            except TrackerDisabled as e:
                self._off(str(e))
                return
            except Exception as e:
                refused = self.refusal(e)
                if refused is not None:
                    self._off(refused)
                    return
                self._note(self.unavailable(e))
                raise
            if self.problem is not None:
                log.warning("%s: logging again", self.name)
                self.problem = None
        return run

    def _off(self, problem: str) -> None:
        self._note(problem)
        self.disabled = True

    def _note(self, problem: str) -> None:
        if self.problem is None:
            log.warning("%s", problem)
        self.problem = problem

    def stored_run_id(self) -> str | None:
        try:
            return json.loads(self.store.get_bytes(self.run_id_key)).get("runId")
        except (NotFound, ValueError):
            return None
