"""Population-based training in the operator, as pure functions over the sweep's status.

The population trains in rounds (`status.pbtRound`): in round R each member runs one RLExperiment,
`TRIAL-rRR`, up to `min((R + 1) x perturbationInterval, template.stop.timesteps)` env steps (its
timesteps count on from the checkpoint it restored; kuberl.sweep.plan, which `kuberl sweep` uses
too, names the runs and sets their seeds and steps). Once every living member's round-R run succeeded,
the round's values go into the members' `intermediate`, and the pure exploit/explore step
(kuberl.sweep.pbt.step_round, the one `kuberl sweep` uses) picks laggards and leaders: a laggard's round-R+1 run
starts from the leader's `status.lastCheckpoint` (`spec.checkpoint.restoreFrom`; the trainer copies it
through storage) with the leader's hyperparameters perturbed; every other member's from its own. The
new round, the params and `restoredFrom` are written to the status before any run of it is created,
so a restart creates the recorded runs (deterministic names; a 409 means one exists) and never steps
a round twice: the step is seeded by the sweep's seed and the round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kuberl.api.sweep_types import FINISHED_TRIAL_STATES, RLSweepSpec, TrialRecord, TrialState
from kuberl.api.types import Phase
from kuberl.operator.status.decision import Event
from kuberl.sweep import search
from kuberl.sweep.pbt import round_message, step_round
from kuberl.sweep.plan import record_round, round_end, rounds
from kuberl.sweep.plan import segment_name as _segment_name
from kuberl.sweep.search import SweepState


def segment_name(record: TrialRecord, round_number: int) -> str:
    return _segment_name(record.name, round_number)


def _done_round(record: TrialRecord, end: int) -> bool:
    return bool(record.intermediate) and record.intermediate[-1][0] == end


def observe_round(spec: RLSweepSpec, state: SweepState, runs: Mapping[str, Any]) -> list[Event]:
    """Each living member's run of the current round: its value once it succeeded, failed members
    finished; then, when the whole population is through the round, the round's step."""
    events: list[Event] = []
    current, end = state.pbt_round, round_end(spec, state.pbt_round)
    metric = spec.objective.metric
    last = current + 1 >= rounds(spec)
    for record in search.active(state):
        seen = runs.get(segment_name(record, current))
        if seen is None or _done_round(record, end):
            continue
        if seen.phase == Phase.FAILED:
            search.finish(record, TrialState.FAILED, None,
                          f"{segment_name(record, current)}: {seen.message or 'the run failed'}")
            events.append(Event("Warning", "TrialFailed", f"trial {record.name}: {record.message}"))
        elif seen.phase == Phase.SUCCEEDED:
            if seen.value is None or (not last and seen.checkpoint is None):
                missing = f"reporting {metric}" if seen.value is None else "a checkpoint to continue from"
                search.finish(record, TrialState.FAILED, None,
                              f"{segment_name(record, current)} succeeded without {missing}")
                events.append(Event("Warning", "TrialFailed", f"trial {record.name}: {record.message}"))
            else:
                record.state = TrialState.RUNNING
                record_round(record, end, seen.value)
        else:
            record.state = TrialState.RUNNING
    alive = search.active(state)
    if not alive or not all(_done_round(t, end) for t in alive):
        return events
    if last:
        for record in alive:
            search.finish(record, TrialState.SUCCEEDED, record.value)
        return events
    checkpoints: dict[int, str] = {}
    for record in alive:
        seen = runs.get(segment_name(record, current))
        if seen is None or seen.checkpoint is None:  # its run was deleted after it succeeded
            search.finish(record, TrialState.FAILED, None, f"{segment_name(record, current)} is gone: nothing to "
                          "continue from")
            events.append(Event("Warning", "TrialFailed", f"trial {record.name}: {record.message}"))
        else:
            checkpoints[record.number] = seen.checkpoint
    if not checkpoints:
        return events
    return events + [_step(spec, state, checkpoints)]


def _step(spec: RLSweepSpec, state: SweepState, checkpoints: dict[int, str]) -> Event:
    steps = step_round(spec, state, checkpoints)
    return Event("Normal", "PBTRound", round_message(spec, state, steps))


def to_create(spec: RLSweepSpec, state: SweepState, runs: Mapping[str, Any]) -> list[TrialRecord]:
    """The members whose run of the current round does not exist yet, within parallelism (a run counts
    until it succeeded or failed)."""
    if spec.suspend:
        return []
    current = state.pbt_round
    running = sum(1 for t in state.trials if (seen := runs.get(segment_name(t, current))) is not None
                  and seen.phase not in (Phase.SUCCEEDED, Phase.FAILED) and t.state not in FINISHED_TRIAL_STATES)
    free = spec.parallelism - running
    result = []
    for record in search.active(state):
        if free <= 0:
            break
        if segment_name(record, current) not in runs:
            result.append(record)
            free -= 1
    return result
