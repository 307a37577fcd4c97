"""A sweep's runs, as pure functions: the RLExperiments each trial runs, their names, seeds and specs,
and population-based training's rounds. The operator (builders/trial.py, sweep_pbt.py) and
`kuberl sweep` (local.py) both build their runs from here, so a trial is the same run in both.

A trial runs the template with its parameters at their paths. With `seedsPerTrial` above 1 it runs
once per seed, `TRIAL-sK` with `config.seed` = the template's seed (0 without one) + K. A PBT member
runs once per round, `TRIAL-rRR`, up to the round's end in env steps (`stop.timesteps`), from the
checkpoint its round starts from (`checkpoint.restoreFrom`), with a seed of its own for each member
and round, and its learning rate annealed over the sweep's whole budget (`config.annealTimesteps`):
the round's `stop.timesteps` is not the end of its schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kuberl.api.algorithms import HYPERPARAMS
from kuberl.api.sweep_types import RLSweepSpec, TrialRecord
from kuberl.api.sweep_validation import set_path, trial_spec
from kuberl.sweep.space import trial_seed

SEED_RANGE = 2**31  # member seeds fit every seed consumer (numpy's 32 bits, with room for the workers' offsets)


@dataclass(frozen=True)
class PlannedRun:
    """One RLExperiment of a trial: `run` is its seed index, or with pbt its round."""

    name: str
    run: int
    seed: int | None  # config.seed; None: the template's own
    spec: dict[str, Any]  # the RLExperiment's spec, in manifest form


def is_pbt(spec: RLSweepSpec) -> bool:
    return spec.search.algorithm == "pbt"


# -- PBT's rounds ---------------------------------------------------------------------------------------
def budget(spec: RLSweepSpec) -> int:
    """A PBT member's env steps over the whole sweep: the template's stop.timesteps."""
    assert spec.template.stop.timesteps is not None  # validation requires it with pbt
    return spec.template.stop.timesteps


def interval(spec: RLSweepSpec) -> int:
    assert spec.search.pbt is not None
    return spec.search.pbt.perturbation_interval


def round_end(spec: RLSweepSpec, round_number: int) -> int:
    """The env steps a member has trained at the end of the round."""
    return min((round_number + 1) * interval(spec), budget(spec))


def rounds(spec: RLSweepSpec) -> int:
    return math.ceil(budget(spec) / interval(spec))


def segment_name(trial_name: str, round_number: int) -> str:
    return f"{trial_name}-r{round_number:02d}"


def record_round(record: TrialRecord, end: int, value: float) -> None:
    """The round's value in the member's record: its intermediate point at the round's end (once, also when the
    round is read again after a restart) and its latest value."""
    record.value = value
    if record.intermediate and record.intermediate[-1][0] == end:
        record.intermediate[-1] = [float(end), value]
    else:
        record.intermediate.append([float(end), value])


# -- names and seeds ------------------------------------------------------------------------------------
def run_names(spec: RLSweepSpec, record: TrialRecord, pbt_round: int = 0) -> list[str]:
    """The RLExperiments of one trial: its name, or NAME-sK for each of seedsPerTrial seeds; with pbt the
    member's run of the round, NAME-rRR."""
    if is_pbt(spec):
        return [segment_name(record.name, pbt_round)]
    if spec.seeds_per_trial == 1:
        return [record.name]
    return [f"{record.name}-s{k}" for k in range(spec.seeds_per_trial)]


def base_seed(spec: RLSweepSpec) -> int:
    seed = spec.template.config.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def run_seed(spec: RLSweepSpec, number: int, run: int) -> int | None:
    """config.seed of trial `number`'s run `run`: with pbt one per member and round, drawn from the template's
    seed, the member and the round (so no two members start from the same weights, and no round replays
    another's env seeds, exploration and minibatch order); the template's seed + K for seed K of several;
    else None (the template's own)."""
    if is_pbt(spec):
        return (trial_seed(base_seed(spec), number, f"pbt-round-{run}") or 0) % SEED_RANGE
    if spec.seeds_per_trial == 1:
        return None
    return base_seed(spec) + run


def trial_seeds(spec: RLSweepSpec, number: int, pbt_round: int = 0) -> list[int]:
    """The seeds a trial's runs get, as its record shows them: each seed's, or with pbt each round's so far."""
    runs = range(pbt_round + 1) if is_pbt(spec) else range(spec.seeds_per_trial)
    seeds = [run_seed(spec, number, run) for run in runs]
    if seeds == [None]:
        template = spec.template.config.get("seed")
        return [template] if isinstance(template, int) and not isinstance(template, bool) else []
    return [seed for seed in seeds if seed is not None]


# -- the runs -------------------------------------------------------------------------------------------
def anneals_over_budget(spec: RLSweepSpec) -> bool:
    """Whether a PBT member's spec carries config.annealTimesteps: its algorithm has the setting and the template
    does not set it already."""
    fields = HYPERPARAMS[spec.template.algorithm].model_fields
    return "anneal_timesteps" in fields and "annealTimesteps" not in spec.template.config


def run_spec(spec: RLSweepSpec, record: TrialRecord, run: int = 0) -> dict[str, Any]:
    """The spec of the trial's run `run` (a seed index; with pbt, the round), in manifest form: the fields the
    template sets, so that what it leaves unset is defaulted for the trial as for the template run alone."""
    template = spec.template.to_manifest(exclude_unset=True)
    body = trial_spec(template, record.params, run_seed(spec, record.number, run))
    if is_pbt(spec):
        set_path(body, "stop.timesteps", round_end(spec, run))
        if anneals_over_budget(spec):
            set_path(body, "config.annealTimesteps", budget(spec))
        if record.restored_from is not None:
            set_path(body, "checkpoint.restoreFrom", record.restored_from)
    return body


def trial_runs(spec: RLSweepSpec, record: TrialRecord, pbt_round: int = 0) -> list[PlannedRun]:
    """Every run the trial has now: its seeds, or with pbt its run of the current round."""
    runs = [pbt_round] if is_pbt(spec) else list(range(spec.seeds_per_trial))
    return [PlannedRun(name=name, run=run, seed=run_seed(spec, record.number, run),
                       spec=run_spec(spec, record, run))
            for name, run in zip(run_names(spec, record, pbt_round), runs, strict=True)]
