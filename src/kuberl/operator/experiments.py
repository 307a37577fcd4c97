"""What the operator remembers of each experiment, and the queue that reconciles them.

One `Experiment` record per (namespace, name), in one `ExperimentQueue` (after Kopf's own
`_core/reactor/queueing.py`, which keeps a stream and a worker per object): a reconcile of one
experiment runs alone; triggers that arrive while one waits coalesce into it; a failed reconcile
is retried with backoff; forgetting an experiment is one deletion. The queue knows nothing of
Kubernetes: the handlers give it the work to run for a record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kuberl.api.contract import TrainerStatus
from kuberl.api.types import Phase

Key = tuple[str, str]  # (namespace, name)
RETRY_BACKOFF = (2.0, 60.0)  # first and longest wait before a failed reconcile is tried again


@dataclass(eq=False)
class Experiment:
    key: Key
    known: bool = False  # an event of the experiment itself arrived (a pod event alone does not make it known)
    generation: int | None = None  # the generation last reconciled for
    ensured: int | None = None  # the generation whose children this process already wrote
    phase: Phase | None = None  # after the last reconcile
    head_ip: str | None = None
    trainer: TrainerStatus | None = None  # the trainer's progress last read
    next_poll: float | None = None  # time.monotonic() of the next poll; None: not polled
    failures: int = 0  # reconciles failed in a row
    quota_waits: int = 0  # passes in a row that a ResourceQuota stopped (the poll backs off)
    queued: bool = False  # a reconcile waits for the lock; further triggers coalesce into it
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)


def retry_seconds(failures: int) -> float:
    """The wait before retry number `failures`: doubling from the first to the longest; any count is
    safe (2.0 * 2**1024 would overflow a float, as the storage writers' backoff once did)."""
    first, longest = RETRY_BACKOFF
    return min(first * 2.0 ** min(failures - 1, 32), longest)


Work = Callable[[Experiment], Awaitable[None]]


class ExperimentQueue:
    """The records, and reconciles run one at a time per experiment."""

    def __init__(self, work: Work):
        self._work = work
        self._records: dict[Key, Experiment] = {}
        self._retries: set[asyncio.Task[None]] = set()  # the event loop keeps only weak references to tasks

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: Key) -> Experiment | None:
        return self._records.get(key)

    def record(self, key: Key) -> Experiment:
        """The experiment's record, new if there is none."""
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = Experiment(key)
        return record

    def forget(self, key: Key) -> None:
        self._records.pop(key, None)

    def phases(self) -> dict[Key, Phase]:
        """{key: phase} of every experiment reconciled at least once (for the metrics)."""
        return {key: record.phase for key, record in self._records.items() if record.phase is not None}

    def due_polls(self, now: float, every: float) -> list[Experiment]:
        """The experiments whose poll is due at `now`, each then scheduled `every` seconds later."""
        due = [record for record in self._records.values() if record.next_poll is not None and record.next_poll <= now]
        for record in due:
            record.next_poll = now + every
        return due

    async def reconcile(self, key: Key, logger: logging.Logger | Any) -> None:
        """Run the work for the experiment; concurrent triggers coalesce into one follow-up run.
        A run that fails (the API unreachable, a conflict) is retried with backoff."""
        record = self.record(key)
        if record.queued:
            return
        record.queued = True
        async with record.lock:
            record.queued = False
            if self._records.get(key) is not record:
                return  # forgotten (deleted) while waiting; a new experiment of that name has its own record
            try:
                await self._work(record)
            except Exception as exc:  # noqa: BLE001 - logged and retried; the next trigger may also fix it
                self._schedule_retry(record, logger, exc)
            else:
                record.failures = 0

    def _schedule_retry(self, record: Experiment, logger: logging.Logger | Any, exc: Exception) -> None:
        record.failures += 1
        delay = retry_seconds(record.failures)
        namespace, name = record.key
        logger.error("reconcile of %s/%s failed (%s: %s); retry %d in %.0f s",
                     namespace, name, type(exc).__name__, exc, record.failures, delay)

        async def retry() -> None:
            await asyncio.sleep(delay)
            current = self._records.get(record.key)
            if current is not None and current.known:  # not deleted meanwhile
                await self.reconcile(record.key, logger)

        task = asyncio.get_running_loop().create_task(retry())
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)
