"""Observers of a training run (Sample Factory's `AlgoObserver`): each part that reacts to a result
(results.jsonl and the sinks, the live status, the metrics, the checkpoint cadence, evaluation,
tracking, the progress line, the user's callbacks) is one observer; the run calls the hooks.

In one iteration the run calls `on_result` (an observer may return the result with more in it), decides whether to
stop, calls `on_last_result` when it does, `on_line` for every results.jsonl line, then
`on_iteration_end`. Every hook of every observer is called in the order the observers were added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import EvaluationLine, EvaluationResult, IterationResult, ResultLine
    from kuberl.trainer.run.summary import Summary
    from kuberl.trainer.storage.base import CheckpointInfo


class RunObserver:
    """One part of a training run; every hook does nothing unless overridden."""

    def on_result(self, result: IterationResult) -> IterationResult:
        """A training iteration's result, before the stop decision; the result to go on with (what an observer
        adds to it reaches results.jsonl)."""
        return result

    def on_last_result(self, result: IterationResult) -> tuple[IterationResult, list[EvaluationLine]]:
        """Training stops after `result` (a stop criterion, not a signal): the result to write, and the lines to
        write after it."""
        return result, []

    def on_line(self, line: ResultLine) -> None:
        """A line of results.jsonl: the iteration's result, then the lines added after the last one."""

    def on_iteration_end(self, result: IterationResult, *, stopping: bool) -> None:
        """The iteration's lines are written; `stopping`: a stop criterion holds."""

    def on_evaluation(self, evaluation: EvaluationResult) -> None:
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

    def on_result(self, result: IterationResult) -> IterationResult:
        for observer in self.observers:
            result = observer.on_result(result)
        return result

    def on_last_result(self, result: IterationResult) -> tuple[IterationResult, list[EvaluationLine]]:
        lines: list[EvaluationLine] = []
        for observer in self.observers:
            result, more = observer.on_last_result(result)
            lines += more
        return result, lines

    def on_line(self, line: ResultLine) -> None:
        for observer in self.observers:
            observer.on_line(line)

    def on_iteration_end(self, result: IterationResult, *, stopping: bool) -> None:
        for observer in self.observers:
            observer.on_iteration_end(result, stopping=stopping)

    def on_evaluation(self, evaluation: EvaluationResult) -> None:
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
