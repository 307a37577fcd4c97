"""`kuberl checkpoints RUN`: a run's complete checkpoints with what each scored, which is latest and best.

`checkpoint_rows` and `checkpoints_table` are pure: the listing (manifests) and results.jsonl in, rows
and text out. A checkpoint's return is the training return mean of its iteration's result line; its
evaluation return is the evaluation that played that iteration's policy. Best is by evaluation return
where any checkpoint has one, else by training return (a tie goes to the older one: as with
`checkpoints/best`, only a better score replaces it); latest is the newest complete checkpoint (highest
attempt, then iteration: what a resume loads).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from kuberl.trainer.iteration_result import IterationResult, ResultLine
from kuberl.trainer.storage.base import CheckpointInfo

COUNTERS_FILE = "counters.json"  # a checkpoint's counters (Algorithm.get_state), its return window among them


@dataclass(frozen=True)
class CheckpointRow:
    iteration: int
    timesteps: int
    attempt: int
    episodeReturnMean: float | None  # noqa: N815 - the results' names
    evaluationReturnMean: float | None  # noqa: N815
    bytes: int
    uri: str
    latest: bool = False
    best: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def returns_by_iteration(results: Iterable[ResultLine]) -> tuple[dict[int, float], dict[int, float]]:
    """(training return mean, evaluation return mean) by iteration from results.jsonl's lines; an evaluation
    counts for the iteration whose policy it played (its own `iteration`), not the line it arrived on."""
    training: dict[int, float] = {}
    evaluation: dict[int, float] = {}
    for line in results:
        value = _number(line.episode_return_mean) if isinstance(line, IterationResult) else None
        if value is not None:
            training[line.iteration] = value
        played = line.evaluation
        score = _number(played.return_mean) if played is not None else None
        if played is not None and score is not None:
            evaluation[played.iteration] = score
    return training, evaluation


def window_return(counters: bytes) -> float | None:
    """The training return mean a checkpoint's counters.json holds (the mean of its return window, as its
    iteration's result line had it); None where it holds no episode."""
    try:
        window = [float(value) for value in json.loads(counters).get("returnWindow") or []]
    except (ValueError, TypeError, AttributeError):
        return None
    return _number(sum(window) / len(window)) if window else None


def checkpoint_rows(checkpoints: list[CheckpointInfo], results: Iterable[ResultLine],
                    saved_returns: dict[int, float] | None = None) -> list[CheckpointRow]:
    """One row per complete checkpoint, oldest first, latest and best marked. `saved_returns`: training returns by
    iteration where results.jsonl has none (a run `Algorithm.save()` wrote: `window_return`)."""
    training, evaluation = returns_by_iteration(results)
    training = {**(saved_returns or {}), **training}
    rows = [CheckpointRow(iteration=c.iteration, timesteps=c.timesteps, attempt=c.attempt,
                          episodeReturnMean=training.get(c.iteration), evaluationReturnMean=evaluation.get(c.iteration),
                          bytes=sum(c.files.values()), uri=c.uri)
            for c in sorted(checkpoints, key=lambda c: c.iteration)]
    if not rows:
        return rows
    latest = max(rows, key=lambda r: (r.attempt, r.iteration))
    scored = [r for r in rows if r.evaluationReturnMean is not None]
    if scored:
        best: CheckpointRow | None = max(scored, key=lambda r: (r.evaluationReturnMean, -r.iteration))
    else:
        trained = [r for r in rows if r.episodeReturnMean is not None]
        best = max(trained, key=lambda r: (r.episodeReturnMean, -r.iteration)) if trained else None
    return [CheckpointRow(**{**asdict(r), "latest": r is latest, "best": r is best}) for r in rows]


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def checkpoints_table(rows: list[CheckpointRow], *, run_uri: str = "") -> str:
    """The rows as an aligned text table (kubectl's style), the marks in the last column."""
    if not rows:
        return f"{run_uri}: no complete checkpoints" if run_uri else "no complete checkpoints"
    header = ("ITERATION", "TIMESTEPS", "RETURN", "EVAL RETURN", "SIZE", "ATTEMPT", "")
    body = [(str(r.iteration), f"{r.timesteps:,}", _cell(r.episodeReturnMean), _cell(r.evaluationReturnMean),
             human_bytes(r.bytes), str(r.attempt), ",".join(m for m, on in (("latest", r.latest), ("best", r.best)) if on))
            for r in rows]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    right = {0, 1, 2, 3, 4, 5}
    lines = ["   ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                        for i, cell in enumerate(row)).rstrip() for row in [header, *body]]
    best = next((r for r in rows if r.best), None)
    basis = ("evaluation return" if best is not None and best.evaluationReturnMean is not None
             else "training return")
    footer = [f"{len(rows)} checkpoint(s){' in ' + run_uri if run_uri else ''}"
              + (f"; best by {basis}" if best is not None else "")]
    return "\n".join(lines + footer)
