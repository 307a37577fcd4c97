"""The run's evaluations, an observer of the run: launched after training iterations, reported into
the results lines (and so the live status, the metrics and the callbacks), videos/ and the best
checkpoint.

An evaluation's result goes under `evaluation` on the results line of the iteration in which it
finished (with `iteration` and `timesteps` naming the policy it evaluated: with workers: 0 that is
the same line). When training stops, the last iteration is evaluated too (unless it just was) and
every running evaluation is awaited: the first finished one goes on the last line; should two
finish there (an earlier one was still running, W > 0), the later gets a line of its own after it,
holding iteration, timesteps, attempt and evaluation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from kuberl.trainer.evaluation.evaluator import Evaluation, Evaluator
from kuberl.trainer.iteration_result import EvaluationLine, EvaluationResult, IterationResult
from kuberl.trainer.run.observer import RunObserver
from kuberl.trainer.storage.checkpoints import read_best_pointer

if TYPE_CHECKING:
    from kuberl.api.types import EvaluationSpec
    from kuberl.trainer.algorithms.base import Algorithm
    from kuberl.trainer.storage.background import BackgroundWriter
    from kuberl.trainer.storage.base import ObjectStore
    from kuberl.trainer.storage.checkpoints import CheckpointWriter

log = logging.getLogger(__name__)

VIDEOS = "videos"


def video_key(iteration: int) -> str:
    return f"{VIDEOS}/evaluation-{iteration:06d}.mp4"


class BestCheckpoint:
    """checkpoint.keepBest: `checkpoints/best` follows the evaluation with the best return mean."""

    def __init__(self, store: ObjectStore, checkpoints: CheckpointWriter,
                 snapshot: Callable[[], dict[str, bytes]]) -> None:
        self.checkpoints = checkpoints
        self.snapshot = snapshot  # the run's state, taken when an evaluation starts
        best = read_best_pointer(store)
        self.best_return: float | None = best["evaluationReturnMean"] if best else None

    def offer(self, evaluation: Evaluation) -> None:
        score = evaluation.return_mean
        if score is not None and evaluation.state is not None and (
            self.best_return is None or score > self.best_return
        ):
            self.best_return = score
            self.checkpoints.submit_best(evaluation.iteration, evaluation.state, evaluation.summary.timesteps, score)


class RunEvaluations(RunObserver):
    def __init__(self, spec: EvaluationSpec, algo: Algorithm, *, store: ObjectStore, background: BackgroundWriter,
                 best: BestCheckpoint | None, report: Callable[[EvaluationResult], None]) -> None:
        self.store = store
        self.background = background
        self.best = best
        self.report = report  # to the run's observers (on_evaluation)
        self.evaluator = Evaluator(spec, algo, snapshot=best.snapshot if best is not None else None)
        self._carried: list[Evaluation] = []  # finished, waiting for a line of their own

    def on_result(self, result: IterationResult) -> IterationResult:
        """After a training iteration: start an evaluation if one is due; put a finished one on `result`."""
        if self.evaluator.due(result.iteration):
            self.evaluator.launch(result.iteration, result.timesteps)
        finished = self._carried + self.evaluator.ready()
        self._carried = finished[1:]
        return result.with_evaluation(self._finished(finished[0])) if finished else result

    def on_last_result(self, result: IterationResult) -> tuple[IterationResult, list[EvaluationLine]]:
        """Training stops after `result`: evaluate its policy, wait for every evaluation; the result with the
        first to finish (unless it has one already) and a line for each other."""
        if result.iteration != self.evaluator.last_iteration:
            self.evaluator.launch(result.iteration, result.timesteps)
        finished, self._carried = self._carried + self.evaluator.drain(), []
        if result.evaluation is None and finished:  # else one finished in on_result() already
            result, finished = result.with_evaluation(self._finished(finished[0])), finished[1:]
        return result, [EvaluationLine(result.iteration, result.timesteps, self._finished(e), result.attempt)
                        for e in finished]

    def _finished(self, evaluation: Evaluation) -> EvaluationResult:
        """The evaluation as its results line holds it (with its video's URI): stored, offered as the best, reported."""
        summary = evaluation.summary
        if evaluation.video is not None:
            key, data = video_key(evaluation.iteration), evaluation.video
            summary = replace(summary, video=self.store.url(key))
            self.background.submit(key, lambda: self.store.put_bytes(key, data))
        if self.best is not None:
            self.best.offer(evaluation)
        self.report(summary)
        score = evaluation.return_mean
        log.info("evaluation of iteration %d: return mean %s over %d episodes", evaluation.iteration,
                 f"{score:.2f}" if score is not None else "-", summary.episodes)
        return summary

    def stop(self) -> None:
        self.evaluator.stop()
