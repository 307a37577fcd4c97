"""CheckpointWriter: checkpoints and the `best` pointer, written by the background writer."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kuberl.trainer.storage.background import BackgroundWriter
from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
from kuberl.trainer.storage.checkpoints.protocol import (
    FencedError,
    apply_retention,
    write_best,
    write_checkpoint,
)

log = logging.getLogger(__name__)

# The writer's job keys: a newer job of each replaces the one waiting.
CHECKPOINT_JOB = "checkpoint"
BEST_JOB = "best"


@dataclass(frozen=True)
class Checkpoint:
    """The state of one iteration, to be written as checkpoints/NNNNNN."""

    iteration: int
    files: dict[str, bytes]
    timesteps: int


@dataclass(frozen=True)
class BestCheckpoint:
    """The checkpoint `best` is to name (written from `files` when it is not there), with its evaluation return."""

    iteration: int
    files: dict[str, bytes]
    timesteps: int
    score: float


class CheckpointWriter:
    """Writes checkpoints in a background thread so training never waits on the store.

    One write at a time; a submit while a write is running replaces any pending one
    (the newest state wins). Failed writes are retried with backoff until they succeed,
    a newer checkpoint is submitted, or the writer is closed. `before_commit` (for example
    RunStorage.flush) runs before each manifest; see write_checkpoint. A newer attempt
    owning the run (FencedError) stops the writer for good.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        keep: int,
        attempt: int = 0,
        on_written: Callable[[CheckpointInfo], None] | None = None,
        before_commit: Callable[[], object] | None = None,
        max_backoff_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.before_commit = before_commit
        self.keep = keep
        self.attempt = attempt
        self.on_written = on_written
        self.last: CheckpointInfo | None = None
        self.best: CheckpointInfo | None = None
        self.last_duration_seconds: float | None = None
        self._lock = threading.Lock()
        self._queued: int | None = None  # the iteration of the checkpoint waiting
        self._in_flight: int | None = None  # the iteration being written (a checkpoint or the best)
        self._writer = BackgroundWriter("kuberl-checkpoint-writer", max_backoff_seconds=max_backoff_seconds,
                                        stop_on=(FencedError,), clock=clock)

    @property
    def fenced(self) -> bool:
        return isinstance(self._writer.stopped_by, FencedError)

    @property
    def failures(self) -> int:
        return self._writer.failures

    @property
    def last_error(self) -> Exception | None:
        return self._writer.last_error

    @property
    def busy(self) -> bool:
        return self._writer.busy

    def submit(self, iteration: int, files: dict[str, bytes], timesteps: int) -> bool:
        """Queue a checkpoint; returns False when it is already written, in flight, or fenced off."""
        with self._lock:
            if self._writer.closed or self.fenced:
                return False
            if (self.last is not None and self.last.iteration >= iteration) or self._in_flight == iteration:
                return False
            if self._queued is not None and self._queued > iteration:
                return False
            self._queued = iteration
            job = functools.partial(self._write, Checkpoint(iteration, files, timesteps))
            return self._writer.submit(f"checkpoint {iteration}", job, key=CHECKPOINT_JOB)

    def submit_best(self, iteration: int, files: dict[str, bytes], timesteps: int, score: float) -> bool:
        """Point `checkpoints/best` at iteration's checkpoint (written from `files` if it is not there);
        a newer best submitted before this one is done replaces it."""
        if self.fenced:
            return False
        job = functools.partial(self._write_best, BestCheckpoint(iteration, files, timesteps, score))
        return self._writer.submit(f"best checkpoint {iteration}", job, key=BEST_JOB)

    def wait(self, timeout: float | None = None) -> CheckpointInfo | None:
        """Wait until nothing is pending or in flight (or the timeout); returns the last written."""
        self._writer.wait(timeout)
        return self.last

    def close(self, timeout: float | None = 60.0) -> CheckpointInfo | None:
        """Finish the pending write (up to `timeout`: a dead store must not hang the exit), then stop."""
        self._writer.close(timeout)
        return self.last

    # -- jobs, on the writer's thread --------------------------------------------------------------
    def _started(self, iteration: int) -> None:
        with self._lock:
            self._in_flight = iteration
            if self._queued == iteration:
                self._queued = None

    def _write(self, checkpoint: Checkpoint) -> None:
        self._started(checkpoint.iteration)
        started = time.monotonic()
        info = write_checkpoint(self.store, checkpoint.iteration, checkpoint.files, timesteps=checkpoint.timesteps,
                                attempt=self.attempt, before_manifest=self.before_commit)
        self.last_duration_seconds = time.monotonic() - started
        self._retain()
        with self._lock:
            self.last, self._in_flight = info, None
        if self.on_written is not None:
            try:
                self.on_written(info)
            except Exception:  # noqa: BLE001 - a callback must not fail the write
                log.exception("checkpoint on_written callback failed")

    def _write_best(self, best: BestCheckpoint) -> None:
        self._started(best.iteration)
        self.best = write_best(self.store, best.iteration, best.files, timesteps=best.timesteps, score=best.score,
                               attempt=self.attempt, before_manifest=self.before_commit)
        self._retain()
        with self._lock:
            self._in_flight = None

    def _retain(self) -> None:
        try:
            apply_retention(self.store, self.keep)
        except Exception as e:  # noqa: BLE001 - retention is retried after the next checkpoint
            log.warning("checkpoint retention failed: %s", e)
