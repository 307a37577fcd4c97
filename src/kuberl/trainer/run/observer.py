"""Observers of a training run (Sample Factory's `AlgoObserver`): each part that reacts to a result
(results.jsonl and the sinks, the live status, the metrics, the checkpoint cadence, evaluation,
tracking, the progress line, the user's callbacks) is one observer; the run calls the hooks.

In one iteration the run calls `on_result` (an observer may add to the result), decides whether to
stop, calls `on_last_result` when it does, `on_line` for every results.jsonl line, then
`on_iteration_end`. Every hook of every observer is called in the order the observers were added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kuberl.trainer.run.summary import Summary
    from kuberl.trainer.storage.base import CheckpointInfo


class RunObserver:
    """One part of a training run; every hook does nothing unless overridden."""

    def on_result(self, result: dict[str, Any]) -> None:
        """A result of `train()`, before the stop decision; what is added to it reaches results.jsonl."""

    def on_last_result(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        """Training stops after `result` (a stop criterion, not a signal); lines to write after it."""
        return []

    def on_line(self, line: dict[str, Any]) -> None:
        """A line of results.jsonl: the iteration's result, then the lines added after the last one."""

    def on_iteration_end(self, result: dict[str, Any], *, stopping: bool) -> None:
        """The iteration's lines are written; `stopping`: a stop criterion holds."""

    def on_evaluation(self, evaluation: dict[str, Any]) -> None:
        """An evaluation finished: the `evaluation` object of a results line."""

    def on_checkpoint(self, iteration: int) -> None:
        """The algorithm's state after `iteration` went to the checkpoint writer."""

    def on_checkpoint_written(self, info: CheckpointInfo, seconds: float) -> None:
        """A checkpoint is complete in storage, written in `seconds`; called from the writer's thread."""

    def on_loop_end(self) -> None:
        """Training stopped (a stop criterion or a signal); the final checkpoint comes next."""

    def on_end(self, summary: Summary, final: CheckpointInfo | None) -> None:
        """How the run ended, after its final checkpoint (`final`: the last written, if any)."""


class Observers(RunObserver):
    """The run's observers, as one: each hook goes to every observer in the order they were added."""

    def __init__(self) -> None:
        self.observers: list[RunObserver] = []

    def add(self, observer: RunObserver) -> None:
        self.observers.append(observer)

    def on_result(self, result: dict[str, Any]) -> None:
        for observer in self.observers:
            observer.on_result(result)

    def on_last_result(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        return [line for observer in self.observers for line in observer.on_last_result(result)]

    def on_line(self, line: dict[str, Any]) -> None:
        for observer in self.observers:
            observer.on_line(line)

    def on_iteration_end(self, result: dict[str, Any], *, stopping: bool) -> None:
        for observer in self.observers:
            observer.on_iteration_end(result, stopping=stopping)

    def on_evaluation(self, evaluation: dict[str, Any]) -> None:
        for observer in self.observers:
            observer.on_evaluation(evaluation)

    def on_checkpoint(self, iteration: int) -> None:
        for observer in self.observers:
            observer.on_checkpoint(iteration)

    def on_checkpoint_written(self, info: CheckpointInfo, seconds: float) -> None:
        for observer in self.observers:
            observer.on_checkpoint_written(info, seconds)

    def on_loop_end(self) -> None:
        for observer in self.observers:
            observer.on_loop_end()

    def on_end(self, summary: Summary, final: CheckpointInfo | None) -> None:
        for observer in self.observers:
            observer.on_end(summary, final)
