"""What to do about an RLSweep, as one pure function of what the operator observed.

`decide_sweep(sweep, status, trials)`: the sweep (validated), its stored status (the durable search
state: every trial recorded, in order) and what each trial's RLExperiments say, to the trials to
create, the runs to suspend or resume, and the new status. The reconcile writes the status first and
only then creates what it names, so a restart between the two finds recorded trials without runs and
creates them (names are deterministic: nothing is proposed or created twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kuberl.api.sweep_types import (
    FINISHED_TRIAL_STATES,
    BestTrial,
    RLSweep,
    RLSweepStatus,
    SweepPhase,
    TrialRecord,
    TrialState,
)
from kuberl.api.sweep_validation import sweep_cluster_errors
from kuberl.api.types import Condition, ConditionStatus, Phase
from kuberl.operator import sweep_pbt
from kuberl.operator.status.conditions import ConditionType
from kuberl.operator.status.decision import Event
from kuberl.operator.status.observation import status_of
from kuberl.sweep import search
from kuberl.sweep.plan import run_names
from kuberl.sweep.search import SweepState

TERMINAL_SWEEP_PHASES = frozenset({SweepPhase.SUCCEEDED, SweepPhase.FAILED})


@dataclass(frozen=True)
class RunObservation:
    """One RLExperiment of a trial, as its status says."""

    phase: Phase | None = None
    suspended: bool = False
    timesteps: int | None = None
    value: float | None = None  # the objective metric
    message: str | None = None
    checkpoint: str | None = None  # status.lastCheckpoint: where a PBT member's next round starts


def observe_run(body: dict[str, Any], metric: str) -> RunObservation:
    """A trial's RLExperiment: its typed status (a phase the operator does not know is none), and the objective
    metric, whichever progress key of the status it names."""
    stored = body.get("status") or {}
    status = status_of(stored)
    value = stored.get(metric)
    return RunObservation(
        phase=status.phase, suspended=bool((body.get("spec") or {}).get("suspend")), timesteps=status.timesteps,
        value=float(value) if isinstance(value, int | float) and math.isfinite(value) else None,
        message=status.message, checkpoint=status.last_checkpoint)


@dataclass
class SweepDecision:
    status: RLSweepStatus
    create: list[tuple[TrialRecord, int]] = field(default_factory=list)  # (trial, seed index)
    suspend: list[str] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def invalid(status: RLSweepStatus | None, generation: int | None, errors: list[str], now: str) -> RLSweepStatus:
    """The status of a sweep whose spec the operator refuses: Failed, Stalled InvalidSpec."""
    result = (status or RLSweepStatus()).model_copy(deep=True)
    result.phase = SweepPhase.FAILED
    result.observed_generation = generation
    result.message = "; ".join(errors)
    result.conditions = _conditions(result.conditions, Phase.FAILED, "InvalidSpec", result.message, now)
    return result


def cluster_errors(sweep: RLSweep) -> list[str]:
    """What a sweep needs in a cluster beyond its schema (the template's own cluster checks included)."""
    return [str(e) for e in sweep_cluster_errors(sweep)]


def _conditions(old: list[Condition], ended: Phase | None, reason: str, message: str, now: str) -> list[Condition]:
    wanted: dict[str, ConditionStatus] = {
        ConditionType.SUCCEEDED: ("True" if ended == Phase.SUCCEEDED else "False" if ended == Phase.FAILED
                                  else "Unknown"),
        ConditionType.FAILED: "True" if ended == Phase.FAILED else "False",
    }
    result = []
    for type_, status in wanted.items():
        previous = next((c for c in old if c.type == type_), None)
        since = previous.last_transition_time if previous and previous.status == status else now
        result.append(Condition(type=type_, status=status, reason=reason, message=message[:1024],
                                last_transition_time=since))
    return result


def _trial_observation(runs: list[RunObservation | None]) -> RunObservation | None:
    """A trial's runs (its seeds) together: missing while any is missing, failed when one failed,
    succeeded when all did (value: their mean), else running at the fewest steps."""
    if any(run is None for run in runs):
        return None
    present = [run for run in runs if run is not None]
    failed = next((run for run in present if run.phase == Phase.FAILED), None)
    if failed is not None:
        return failed
    values = [run.value for run in present]
    steps = [run.timesteps for run in present]
    phase = Phase.SUCCEEDED if all(run.phase == Phase.SUCCEEDED for run in present) else Phase.RUNNING
    return RunObservation(
        phase=phase, suspended=all(run.suspended for run in present),
        timesteps=None if any(s is None for s in steps) else min(steps),  # type: ignore[type-var]
        value=None if any(v is None for v in values) else sum(values) / len(values),  # type: ignore[arg-type]
    )


def _record_progress(sweep: RLSweep, record: TrialRecord, seen: RunObservation) -> None:
    """Intermediate values: the objective each time the trial's timesteps pass another interval."""
    early = sweep.spec.early_stopping
    if early is None or early.algorithm == "none" or seen.timesteps is None or seen.value is None:
        return
    step = (seen.timesteps // early.interval) * early.interval
    last = record.intermediate[-1][0] if record.intermediate else 0
    if step >= early.interval and step > last:
        record.intermediate.append([float(step), seen.value])


def decide_sweep(sweep: RLSweep, stored: RLSweepStatus | None, runs: dict[str, RunObservation],
                 generation: int | None, now: str) -> SweepDecision:
    """The whole lifecycle of a sweep as one function: `runs` maps every RLExperiment of the sweep
    that exists to what its status says."""
    spec = sweep.spec
    status = (stored or RLSweepStatus()).model_copy(deep=True)
    state = SweepState(trials=status.trials, pbt_round=status.pbt_round or 0)
    decision = SweepDecision(status=status)
    finished_before = status.phase in TERMINAL_SWEEP_PHASES
    pbt = spec.search.algorithm == "pbt"

    if pbt:
        decision.events += sweep_pbt.observe_round(spec, state, runs)
    for record in [] if pbt else state.trials:
        names = run_names(spec, record)
        seen = _trial_observation([runs.get(name) for name in names])
        if record.state in FINISHED_TRIAL_STATES:
            continue
        if seen is None:
            if not finished_before:
                decision.create += [(record, k) for k, name in enumerate(names) if name not in runs]
            continue
        if seen.phase == Phase.SUCCEEDED:
            if seen.value is None:
                search.finish(record, TrialState.FAILED, None, f"succeeded without reporting {spec.objective.metric}")
            else:
                search.finish(record, TrialState.SUCCEEDED, seen.value)
            continue
        if seen.phase == Phase.FAILED:
            search.finish(record, TrialState.FAILED, None, seen.message or "the trial failed")
            decision.events.append(Event("Warning", "TrialFailed", f"trial {record.name}: {record.message}"))
            continue
        record.state = TrialState.RUNNING
        _record_progress(sweep, record, seen)
        if search.should_prune(spec, state, record.number):
            step, value = record.intermediate[-1]
            search.finish(record, TrialState.PRUNED, value, f"pruned at {int(step):,} steps "
                          f"({spec.early_stopping.algorithm if spec.early_stopping else ''}); suspended")
            decision.events.append(Event("Normal", "TrialPruned", f"trial {record.name}: {record.message}"))

    ended = None if finished_before else search.outcome(spec, state)
    if ended is not None:
        for record in search.active(state):  # the sweep is over: what still runs stops
            search.finish(record, TrialState.PRUNED, record.intermediate[-1][1] if record.intermediate else None,
                          f"stopped: the sweep ended ({ended.reason}); suspended")
        status.phase = ended.phase
        status.message = ended.message
        status.completion_time = now
        status.conditions = _conditions(status.conditions, ended.phase, ended.reason, ended.message, now)
        decision.events.append(Event("Normal" if ended.phase == SweepPhase.SUCCEEDED else "Warning", ended.reason,
                                     ended.message))
    elif not finished_before:
        proposed = search.propose(spec, state, sweep.name)
        if pbt:
            decision.create += [(record, state.pbt_round) for record in sweep_pbt.to_create(spec, state, runs)]
        for record in [] if pbt else proposed:
            decision.create += [(record, k) for k in range(len(run_names(spec, record)))]
        status.phase = SweepPhase.SUSPENDED if spec.suspend else (
            SweepPhase.RUNNING if state.trials else SweepPhase.PENDING)
        status.message = None
        status.conditions = _conditions(status.conditions, None, Phase.SUSPENDED if spec.suspend else Phase.RUNNING,
                                        "", now)

    # Level-based: every run of a pruned or stopped trial, and of a suspended sweep, is suspended.
    for record in state.trials:
        hold = spec.suspend or record.state == TrialState.PRUNED or (
            status.phase in TERMINAL_SWEEP_PHASES and record.state not in FINISHED_TRIAL_STATES)
        for name in run_names(spec, record, state.pbt_round):
            seen_run = runs.get(name)
            if seen_run is None or seen_run.phase in (Phase.SUCCEEDED, Phase.FAILED):
                continue
            if hold and not seen_run.suspended:
                decision.suspend.append(name)
            elif not hold and seen_run.suspended and record.state == TrialState.RUNNING:
                decision.resume.append(name)

    counts = state.counts()
    status.trials = state.trials
    status.pbt_round = state.pbt_round if pbt else None
    status.trials_succeeded = counts[TrialState.SUCCEEDED]
    status.trials_running = counts[TrialState.RUNNING] + counts[TrialState.PENDING]
    status.trials_pruned = counts[TrialState.PRUNED]
    status.trials_failed = counts[TrialState.FAILED]
    top = search.best(spec, state)
    status.best = None if top is None else BestTrial(number=top.number, name=top.name, params=top.params,
                                                     value=top.value)  # type: ignore[arg-type]
    status.observed_generation = generation
    status.start_time = status.start_time or now
    return decision
