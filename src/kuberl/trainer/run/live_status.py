"""The run's live status: what GET /status answers (kuberl.api.contract's `TrainerStatus`), kept up
to date by an observer of the run and read by the status server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from kuberl.api.contract import RESULT_FAILED, RESULT_INVALID_SPEC, RESULT_SUCCEEDED
from kuberl.api.types import Phase
from kuberl.trainer.run.observer import RunObserver

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import EvaluationResult, IterationResult
    from kuberl.trainer.run.summary import Summary
    from kuberl.trainer.storage.base import CheckpointInfo


@dataclass
class LiveStatus:
    """What GET /status answers; updated by the training loop, read by the status server."""

    phase: Phase = Phase.STARTING
    result: str | None = None  # how the run ended (a RESULT_* name of kuberl.api.contract), once it has
    attempt: int = 1
    iteration: int = 0
    timesteps: int = 0
    episodeReturnMean: float | None = None  # noqa: N815
    evaluationReturnMean: float | None = None  # noqa: N815
    lastCheckpoint: str | None = None  # noqa: N815
    timeSeconds: float = 0.0  # noqa: N815
    envStepsPerSecond: float = 0.0  # noqa: N815
    trackingProblem: str | None = None  # noqa: N815 - why MLflow or W&B is not logging, while it is not
    message: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}

    def update(self, **values: Any) -> None:
        with self.lock:
            for key, value in values.items():
                setattr(self, key, value)

    def finish(self, result: str) -> None:
        """The run ended with `result`: its outcome, and the phase it means for the trainer (a signal's
        Terminated leaves the phase as it was: whether the run goes on is the operator's to decide)."""
        phase = PHASE_OF_RESULT.get(result, self.phase)
        self.update(result=result, phase=phase)


# The trainer's phase once a run has ended with a result (kuberl.api.contract's RESULT_* names).
PHASE_OF_RESULT = {RESULT_SUCCEEDED: Phase.SUCCEEDED, RESULT_FAILED: Phase.FAILED, RESULT_INVALID_SPEC: Phase.FAILED}


class LiveStatusObserver(RunObserver):
    """Puts each result, evaluation and written checkpoint into the live status."""

    def __init__(self, status: LiveStatus, tracking_problem: Callable[[], str | None]) -> None:
        self.status = status
        self.tracking_problem = tracking_problem

    def on_iteration_end(self, result: IterationResult, *, stopping: bool) -> None:
        self.status.update(
            iteration=result.iteration, timesteps=result.timesteps, episodeReturnMean=result.episode_return_mean,
            timeSeconds=result.time_seconds, envStepsPerSecond=result.env_steps_per_second,
            trackingProblem=self.tracking_problem(),
        )

    def on_evaluation(self, evaluation: EvaluationResult) -> None:
        self.status.update(evaluationReturnMean=evaluation.return_mean)

    def on_checkpoint_written(self, info: CheckpointInfo, seconds: float) -> None:
        self.status.update(lastCheckpoint=info.uri)

    def on_end(self, summary: Summary, final: CheckpointInfo | None) -> None:
        self.status.update(lastCheckpoint=summary.lastCheckpoint, message=summary.message)
