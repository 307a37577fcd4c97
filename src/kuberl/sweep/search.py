"""The search as pure functions over a durable, JSON-able SweepState.

`propose` asks Optuna's sampler (random, TPE) or walks the grid; `record_results` turns a trial's
results into intermediate values; `should_prune` asks Optuna's pruner (median, successive halving);
`outcome` says whether the sweep is over. Each call rebuilds an in-memory Optuna study from the
recorded trials (`study.add_trial`), so the state needs no database and survives restarts: a
sampler is seeded per trial number, so a rebuilt study proposes what the lost one would have.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from kuberl.api.base import StrictModel
from kuberl.api.sweep_types import (
    FINISHED_TRIAL_STATES,
    RLSweepSpec,
    SweepPhase,
    TrialRecord,
    TrialState,
)
from kuberl.api.sweep_validation import grid_values
from kuberl.sweep.plan import trial_seeds
from kuberl.sweep.space import cast, distributions, trial_seed

MAX_NAME = 253 - len("-t0000")


class SweepState(StrictModel):
    """Everything the search needs to continue: the trials proposed so far, in order (and PBT's round)."""

    trials: list[TrialRecord] = Field(default_factory=list)
    pbt_round: int = Field(0, ge=0, description="pbt: exploit/explore steps done.")

    def trial(self, number: int) -> TrialRecord:
        return self.trials[number]

    def counts(self) -> dict[TrialState, int]:
        return {state: sum(t.state == state for t in self.trials) for state in TrialState}


def trial_name(sweep: str, number: int) -> str:
    """The trial's run name, deterministic: SWEEP-t000, SWEEP-t001, ..."""
    return f"{sweep[:MAX_NAME].rstrip('-.')}-t{number:03d}"


def slots(spec: RLSweepSpec) -> int:
    """Trials that may run at once: each of a trial's seeds takes one slot of parallelism."""
    return max(1, spec.parallelism // spec.seeds_per_trial)


def active(state: SweepState) -> list[TrialRecord]:
    return [t for t in state.trials if t.state not in FINISHED_TRIAL_STATES]


# -- Optuna's study, rebuilt ---------------------------------------------------------------------------
_OPTUNA_STATES = {
    TrialState.PENDING: "RUNNING", TrialState.RUNNING: "RUNNING", TrialState.SUCCEEDED: "COMPLETE",
    TrialState.PRUNED: "PRUNED", TrialState.FAILED: "FAIL",
}


def _direction(spec: RLSweepSpec) -> Literal["maximize", "minimize"]:
    return spec.objective.goal


def _sampler(spec: RLSweepSpec, number: int) -> Any:
    import optuna

    seed = trial_seed(spec.search.seed, number)
    if spec.search.algorithm == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.search.startup_trials,
                                          constant_liar=True)
    return optuna.samplers.RandomSampler(seed=seed)


def _pruner(spec: RLSweepSpec) -> Any:
    import optuna

    early = spec.early_stopping
    if early is None or early.algorithm == "none":
        return optuna.pruners.NopPruner()
    if early.algorithm == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=early.startup_trials, n_warmup_steps=early.min_steps)
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(early.min_steps, early.interval),
                                                  reduction_factor=early.reduction_factor)


def build_study(spec: RLSweepSpec, state: SweepState, *, sampler: Any = None) -> Any:
    """An in-memory Optuna study holding every recorded trial, in order (trial number = record number)."""
    import optuna
    from optuna.trial import TrialState as OptunaState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=_direction(spec), sampler=sampler, pruner=_pruner(spec))
    dists = distributions(spec)
    # The operator records a trial's value whenever it reads the trial's status, so trials report at steps of
    # their own; the pruners compare trials at one step. Each trial's last value by then stands at every step any
    # trial reported inside its own range.
    steps = sorted({int(step) for record in state.trials for step, _ in record.intermediate})
    for record in state.trials:
        optuna_state = getattr(OptunaState, _OPTUNA_STATES[record.state])
        value = record.value if optuna_state == OptunaState.COMPLETE else None
        if optuna_state == OptunaState.COMPLETE and (value is None or not math.isfinite(value)):
            optuna_state, value = OptunaState.FAIL, None
        study.add_trial(optuna.trial.create_trial(
            state=optuna_state, value=value,
            params={k: v for k, v in record.params.items() if k in dists},
            distributions={k: d for k, d in dists.items() if k in record.params},
            intermediate_values=held_values(record.intermediate, steps),
            system_attrs=dict(record.pruner_state),
        ))
    return study


def held_values(points: Sequence[Sequence[float]], steps: list[int]) -> dict[int, float]:
    """A trial's (step, value) points at each of `steps` within its first and last step: the last value by then."""
    ordered = sorted((int(step), float(value)) for step, value in points)
    if not ordered:
        return {}
    held: dict[int, float] = {}
    at = 0
    for step in steps:
        if step < ordered[0][0] or step > ordered[-1][0]:
            continue
        while at + 1 < len(ordered) and ordered[at + 1][0] <= step:
            at += 1
        held[step] = ordered[at][1]
    return held


# -- proposing -----------------------------------------------------------------------------------------
def grid_points(spec: RLSweepSpec) -> list[dict[str, Any]]:
    """Every point of the grid, in a fixed order (shuffled by search.seed when one is set)."""
    paths = [p.path for p in spec.parameters]
    points = [dict(zip(paths, combo, strict=True))
              for combo in itertools.product(*(grid_values(p) for p in spec.parameters))]
    if spec.search.seed is not None:
        random.Random(spec.search.seed).shuffle(points)
    return points


def _ask(spec: RLSweepSpec, state: SweepState, number: int) -> dict[str, Any]:
    study = build_study(spec, state, sampler=_sampler(spec, number))
    trial = study.ask(distributions(spec))
    return {p.path: cast(p, trial.params[p.path]) for p in spec.parameters}


def _next_params(spec: RLSweepSpec, state: SweepState, number: int) -> dict[str, Any] | None:
    if spec.search.algorithm == "grid":
        taken = [t.params for t in state.trials]
        return next((point for point in grid_points(spec) if point not in taken), None)
    return _ask(spec, state, number)


def trial_budget(spec: RLSweepSpec) -> int:
    if spec.search.algorithm == "pbt" and spec.search.pbt is not None:
        return spec.search.pbt.population_size
    if spec.search.algorithm == "grid":
        return min(spec.max_trials, len(grid_points(spec)))
    return spec.max_trials


def propose(spec: RLSweepSpec, state: SweepState, sweep_name: str) -> list[TrialRecord]:
    """New trials (recorded in `state` as Pending) to fill the free slots, within maxTrials and the grid.
    None while the sweep is suspended or over."""
    if spec.suspend or outcome(spec, state) is not None:
        return []
    if spec.search.algorithm == "pbt":  # the whole population starts at once; its segments share the slots
        free = trial_budget(spec) - len(state.trials)
    else:
        free = slots(spec) - len(active(state))
    new: list[TrialRecord] = []
    while free > 0 and len(state.trials) < trial_budget(spec):
        number = len(state.trials)
        params = _next_params(spec, state, number)
        if params is None:
            break  # the grid is exhausted
        record = TrialRecord(number=number, name=trial_name(sweep_name, number), params=params,
                             state=TrialState.PENDING, seeds=trial_seeds(spec, number))
        state.trials.append(record)
        new.append(record)
        free -= 1
    return new


# -- observing ---------------------------------------------------------------------------------------
def metric_of(result: dict[str, Any], metric: str) -> float | None:
    """A result's objective: a key of the result line (dots reach into nested ones), evaluationReturnMean
    the latest evaluation's return mean."""
    if metric == "evaluationReturnMean":
        metric = "evaluation.returnMean"
    value: Any = result
    for part in metric.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def intermediate_values(results: Iterable[dict[str, Any]], metric: str, interval: int) -> list[list[float]]:
    """[step, value] where a run's timesteps first cross each multiple of `interval`, the step being that
    multiple (so every trial reports at the same steps, as the pruners compare them)."""
    points: list[list[float]] = []
    next_step = interval
    for result in results:
        steps = result.get("timesteps")
        value = metric_of(result, metric)
        if not isinstance(steps, int) or value is None:
            continue
        while steps >= next_step:
            if not points or points[-1][0] < next_step:
                points.append([float(next_step), value])
            next_step += interval
    return points


def mean_intermediate(per_seed: list[list[list[float]]]) -> list[list[float]]:
    """The seeds' mean at each step all of them reached."""
    if not per_seed:
        return []
    common = min(len(points) for points in per_seed)
    return [[per_seed[0][i][0], sum(points[i][1] for points in per_seed) / len(per_seed)] for i in range(common)]


def should_prune(spec: RLSweepSpec, state: SweepState, number: int) -> bool:
    """Ask the pruner about a running trial's latest intermediate value; its notes go into the record."""
    record = state.trials[number]
    early = spec.early_stopping
    if early is None or early.algorithm == "none" or not record.intermediate or record.state in FINISHED_TRIAL_STATES:
        return False
    if record.intermediate[-1][0] < early.min_steps:
        return False
    study = build_study(spec, state)
    frozen = study.get_trials(deepcopy=False)[number]
    pruned = bool(study.pruner.prune(study, frozen))
    notes = study.get_trials(deepcopy=False)[number].system_attrs
    record.pruner_state = {k: v for k, v in notes.items() if k.startswith("completed_rung_")}
    return pruned


def finish(record: TrialRecord, trial_state: TrialState, value: float | None, message: str | None = None) -> None:
    record.state = trial_state
    record.value = value
    if message is not None:
        record.message = message


# -- the end -----------------------------------------------------------------------------------------
def better(spec: RLSweepSpec, a: float, b: float) -> bool:
    return a > b if spec.objective.goal == "maximize" else a < b


def best(spec: RLSweepSpec, state: SweepState) -> TrialRecord | None:
    done = [t for t in state.trials if t.state == TrialState.SUCCEEDED and t.value is not None]
    result: TrialRecord | None = None
    for trial in done:
        if result is None or better(spec, trial.value, result.value):  # type: ignore[arg-type]
            result = trial
    return result


@dataclass(frozen=True)
class Outcome:
    phase: SweepPhase
    reason: str
    message: str


def outcome(spec: RLSweepSpec, state: SweepState) -> Outcome | None:
    """How the sweep ended, or None while it goes on."""
    failed = [t for t in state.trials if t.state == TrialState.FAILED]
    if spec.max_failed_trials is not None and len(failed) > spec.max_failed_trials:
        names = ", ".join(t.name for t in failed)
        return Outcome(SweepPhase.FAILED, "MaxFailedTrialsExceeded",
                       f"{len(failed)} trials failed (maxFailedTrials {spec.max_failed_trials}): {names}")
    top = best(spec, state)
    target = spec.objective.target
    if target is not None and top is not None and top.value is not None and (
            top.value == target or better(spec, top.value, target)):
        return Outcome(SweepPhase.SUCCEEDED, "TargetReached",
                       f"trial {top.name} reached {spec.objective.metric} {top.value:g} (target {target:g})")
    if len(state.trials) >= trial_budget(spec) and not active(state):
        if top is None:
            return Outcome(SweepPhase.FAILED, "NoTrialSucceeded", f"none of {len(state.trials)} trials succeeded")
        return Outcome(SweepPhase.SUCCEEDED, "TrialsDone",
                       f"{len(state.trials)} trials; best {top.name}: {spec.objective.metric} {top.value:g}")
    return None
