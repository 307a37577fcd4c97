"""`kuberl train`'s progress bar on a terminal (tqdm): progress towards the stop criterion that will end
the run first, with steps/s, the return (beside its target) and tqdm's ETA.

Of `stop.timesteps`, `stop.iterations` and `stop.timeSeconds` the bar follows the one furthest along
(each grows about linearly with training time, so the one closest to done ends the run first); it
switches when another overtakes it. Return targets cannot be timed, so they are shown beside the bar;
a run stopped only by them gets a counter of iterations without an ETA.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from tqdm import tqdm

if TYPE_CHECKING:
    from kuberl.api.types import StopSpec
    from kuberl.trainer.iteration_result import IterationResult

BAR_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
COUNTER_FORMAT = "{desc} {n_fmt} [{elapsed}{postfix}]"
REDRAW_SECONDS = 0.5


@dataclass(frozen=True)
class Criterion:
    """A stop criterion the bar can count towards: its name in the manifest, what it counts, the unit."""

    name: str
    unit: str
    target: int

    def value(self, result: IterationResult) -> float:
        return float(COUNTED[self.name](result))


# What each countable stop criterion counts, in a result.
COUNTED: dict[str, Callable[[IterationResult], float]] = {
    "timesteps": lambda result: result.timesteps,
    "iterations": lambda result: result.iteration,
    "timeSeconds": lambda result: result.time_seconds,
}


def countable_criteria(stop: StopSpec) -> list[Criterion]:
    """The stop criteria that grow with training, in the order `stop_reason` checks them."""
    candidates = (("timesteps", "steps", stop.timesteps), ("iterations", "it", stop.iterations),
                  ("timeSeconds", "s", stop.time_seconds))
    return [Criterion(name, unit, target) for name, unit, target in candidates if target is not None]


def leading_criterion(criteria: list[Criterion], result: IterationResult) -> Criterion | None:
    """The criterion closest to done (the first listed on a tie), or None when there is none to count."""
    if not criteria:
        return None
    return max(criteria, key=lambda c: c.value(result) / c.target)


def bar_postfix(stop: StopSpec, result: IterationResult) -> str:
    """What the bar shows after the ETA: steps/s, the return mean (and its target), an evaluation's."""
    parts = [f"{result.env_steps_per_second:,.0f} steps/s"]
    ret = result.episode_return_mean
    ret_text = f"{ret:.1f}" if ret is not None and math.isfinite(ret) else "-"
    target = stop.episode_return_mean
    parts.append(f"return {ret_text}" + (f" -> {target:g}" if target is not None else ""))
    evaluated = result.evaluation.return_mean if result.evaluation is not None else None
    if evaluated is not None or stop.evaluation_return_mean is not None:
        eval_text = f"{evaluated:.1f}" if evaluated is not None else "-"
        eval_target = stop.evaluation_return_mean
        parts.append(f"eval {eval_text}" + (f" -> {eval_target:g}" if eval_target is not None else ""))
    return ", ".join(parts)


class StopBar:
    """One tqdm bar for a run, made at the first result: its rate, and so its ETA, are measured from there."""

    def __init__(self, out: TextIO, stop: StopSpec) -> None:
        self.out = out
        self.stop = stop
        self.criteria = countable_criteria(stop)
        self.bar: tqdm | None = None
        self.following: Criterion | None = None
        self._first: IterationResult | None = None
        self._drawn = 0.0

    def update(self, result: IterationResult, *, final: bool = False, extra: str = "") -> None:
        """Draws `result` (at most every REDRAW_SECONDS unless `final`); `extra` goes at the end of the postfix."""
        if self.bar is None:
            self._first = result
        leading = leading_criterion(self.criteria, result)
        postfix = bar_postfix(self.stop, result) + extra
        if self.bar is None or leading != self.following:
            self._follow(leading, postfix)
        assert self.bar is not None
        value = leading.value(result) if leading is not None else float(result.iteration)
        self.bar.set_postfix_str(postfix, refresh=False)
        # tqdm drops a total that n has passed, and a run's last iteration usually passes its target
        self.bar.n = int(min(value, self.bar.total) if self.bar.total is not None else value)
        now = time.monotonic()
        if final or now - self._drawn >= REDRAW_SECONDS:
            self.bar.refresh()
            self._drawn = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _follow(self, criterion: Criterion | None, postfix: str) -> None:
        """Count towards `criterion`, from its value at the first result (tqdm's average rate since then)."""
        first = self._first
        assert first is not None
        base = criterion.value(first) if criterion is not None else float(first.iteration)
        options: dict[str, Any] = {
            "desc": criterion.name if criterion is not None else "iterations",
            "total": criterion.target if criterion is not None else None,
            "unit": criterion.unit if criterion is not None else "it",
            "unit_scale": criterion is not None and criterion.unit == "steps",
            "bar_format": BAR_FORMAT if criterion is not None else COUNTER_FORMAT,
            "postfix": postfix,
        }
        started = self.bar.start_t if self.bar is not None else None
        if self.bar is not None:
            self.bar.leave = False  # the new bar takes its line
            self.bar.close()
        self.bar = tqdm(file=self.out, initial=int(base), smoothing=0, dynamic_ncols=True,
                        leave=True, **options)
        if started is not None:
            self.bar.start_t = started  # the rate stays measured from the first result
        self.following = criterion
        self._drawn = time.monotonic()  # tqdm drew it

