"""When the run checkpoints: every `checkpoint.everyIterations` iterations, and once at the end."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kuberl.trainer.run.observer import RunObserver

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import IterationResult
    from kuberl.trainer.storage.base import CheckpointInfo
    from kuberl.trainer.storage.checkpoints import CheckpointWriter


class CheckpointCadence(RunObserver):
    """Hands the run's state to the checkpoint writer; `on_submitted(iteration)` follows each hand-over."""

    def __init__(self, checkpoints: CheckpointWriter, every: int, state: Callable[[], dict[str, bytes]],
                 on_submitted: Callable[[int], None]) -> None:
        self.checkpoints = checkpoints
        self.every = every
        self.state = state
        self.on_submitted = on_submitted

    def on_iteration_end(self, result: IterationResult, *, stopping: bool) -> None:
        if not stopping and result.iteration % self.every == 0:  # the final one follows when stopping
            self.submit(result)

    def submit(self, result: IterationResult) -> None:
        self.checkpoints.submit(result.iteration, self.state(), result.timesteps)
        self.on_submitted(result.iteration)

    def final(self, result: IterationResult | None, timeout: float) -> CheckpointInfo | None:
        """Checkpoint the last result (if there is one), wait for the writer; the last checkpoint written."""
        if result is not None:
            self.submit(result)
        return self.checkpoints.wait(timeout=timeout)
