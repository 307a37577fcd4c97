"""How a run ends: the stop criterion a result meets, the summary (and so the exit code), and the
summary in the termination log for the operator (kuberl.api.contract)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from kuberl.api.contract import (
    EXIT_INTERRUPTED,
    RESULT_TERMINATED,
    SUMMARY_KEYS,
    TERMINATION_LOG_LIMIT,
    exit_code_for,
)
from kuberl.api.types import StopSpec

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import IterationResult


@dataclass
class Summary:
    result: str  # Succeeded | Failed | InvalidSpec | Terminated
    reason: str
    message: str
    iteration: int = 0
    timesteps: int = 0
    episodeReturnMean: float | None = None  # noqa: N815 - the contract's key
    evaluationReturnMean: float | None = None  # noqa: N815
    lastCheckpoint: str | None = None  # noqa: N815
    runUri: str | None = None  # noqa: N815

    @property
    def exit_code(self) -> int:
        if self.result == RESULT_TERMINATED and self.reason == "SIGINT":  # the reason: the signal's name
            return EXIT_INTERRUPTED
        return exit_code_for(self.result)


def stop_reason(stop: StopSpec, result: IterationResult) -> str | None:
    """Which stop criterion a training result meets, or None to go on."""
    ret = result.episode_return_mean
    if stop.episode_return_mean is not None and ret is not None and ret >= stop.episode_return_mean:
        return f"episodeReturnMean {ret:.1f} >= {stop.episode_return_mean:g}"
    if stop.timesteps is not None and result.timesteps >= stop.timesteps:
        return f"timesteps {result.timesteps:,} >= {stop.timesteps:,}"
    evaluated = result.evaluation.return_mean if result.evaluation is not None else None
    if stop.evaluation_return_mean is not None and evaluated is not None and evaluated >= stop.evaluation_return_mean:
        return f"evaluationReturnMean {evaluated:.1f} >= {stop.evaluation_return_mean:g}"
    if stop.iterations is not None and result.iteration >= stop.iterations:
        return f"iteration {result.iteration} >= {stop.iterations}"
    if stop.time_seconds is not None and result.time_seconds >= stop.time_seconds:
        return f"timeSeconds {result.time_seconds:.0f} >= {stop.time_seconds}"
    return None


def write_termination_log(summary: Summary, path: str) -> None:
    body = {k: v for k, v in asdict(summary).items() if k in SUMMARY_KEYS}
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(body)[:TERMINATION_LOG_LIMIT])
    except OSError as exc:
        print(f"warning: cannot write termination log {path}: {exc}", file=sys.stderr)
