"""Population-based training's exploit and explore steps (Jaderberg et al. 2017), as pure functions.

After every perturbation interval the population is ranked by its members' latest objective value;
each member of the bottom quantile copies the checkpoint of a member of the top quantile (exploit)
and continues from it with that member's hyperparameters perturbed (explore): each one multiplied by
0.8 or 1.2 (clipped to its range; a categorical moves to a neighbouring value), or with
`resampleProbability` drawn afresh from its range. The draws are seeded by the sweep's seed and the
round, so a restarted sweep repeats the same step.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from kuberl.api.sweep_types import RLSweepSpec, SweepParameter, TrialState
from kuberl.sweep.plan import round_end, trial_seeds
from kuberl.sweep.search import SweepState, active
from kuberl.sweep.space import cast, trial_seed

FACTORS = (0.8, 1.2)


@dataclass(frozen=True)
class Exploit:
    trial: int  # the lagging member, which continues from the donor's checkpoint
    donor: int  # the leading member whose checkpoint it copies
    params: dict[str, Any]  # the donor's hyperparameters, perturbed


def _resample(parameter: SweepParameter, rng: random.Random) -> Any:
    if parameter.type == "categorical":
        return rng.choice(list(parameter.values or []))
    assert parameter.low is not None and parameter.high is not None
    if parameter.log:
        value = math.exp(rng.uniform(math.log(parameter.low), math.log(parameter.high)))
    else:
        value = rng.uniform(parameter.low, parameter.high)
    return cast(parameter, round(value) if parameter.type == "int" else value)


def perturb_value(parameter: SweepParameter, value: Any, rng: random.Random, resample_probability: float) -> Any:
    """One hyperparameter explored: resampled, or scaled by 0.8/1.2 within [low, high], or a categorical's
    neighbour."""
    if rng.random() < resample_probability:
        return _resample(parameter, rng)
    if parameter.type == "categorical":
        values = list(parameter.values or [])
        index = values.index(value) if value in values else 0
        return values[min(max(index + rng.choice((-1, 1)), 0), len(values) - 1)]
    assert parameter.low is not None and parameter.high is not None
    scaled = min(max(float(value) * rng.choice(FACTORS), parameter.low), parameter.high)
    if parameter.type == "int":
        moved = round(scaled)
        if moved == value and parameter.high > parameter.low:  # 0.8 x 2 rounds back to 2: move by one
            moved = min(max(int(value) + (1 if scaled > value else -1), int(parameter.low)), int(parameter.high))
        return int(moved)
    return float(scaled)


def perturb(spec: RLSweepSpec, params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    assert spec.search.pbt is not None
    return {p.path: perturb_value(p, params[p.path], rng, spec.search.pbt.resample_probability)
            for p in spec.parameters}


def exploit_explore(spec: RLSweepSpec, params: dict[int, dict[str, Any]], scores: dict[int, float | None],
                    round_number: int) -> list[Exploit]:
    """The round's exploit steps: members of the bottom quantile (a member without a score is lagging)
    each take a random member of the top quantile's checkpoint and perturbed hyperparameters."""
    assert spec.search.pbt is not None
    rng = random.Random(trial_seed(spec.search.seed if spec.search.seed is not None else 0, round_number, "pbt"))
    sign = 1.0 if spec.objective.goal == "maximize" else -1.0
    ranked = sorted(params, key=lambda n: (scores.get(n) is not None, sign * (scores.get(n) or 0.0), -n),
                    reverse=True)  # best first; ties go to the older member
    count = max(1, int(len(ranked) * spec.search.pbt.quantile_fraction))
    if len(ranked) < 2 * count:
        return []
    top, bottom = ranked[:count], ranked[-count:]
    steps = []
    for member in sorted(bottom):
        donor = rng.choice(top)
        steps.append(Exploit(trial=member, donor=donor, params=perturb(spec, params[donor], rng)))
    return steps


def step_round(spec: RLSweepSpec, state: SweepState, checkpoints: dict[int, str]) -> list[Exploit]:
    """Exploit and explore after the current round, on the living members (each scored by its value of the round):
    laggards take a leader's checkpoint and perturbed hyperparameters, the others their own checkpoint
    (`checkpoints`: each living member's of the round); every member is Pending in the next round, with that
    round's seed recorded. The exploit steps taken come back."""
    alive = active(state)
    scores = {t.number: t.value for t in alive}
    steps = exploit_explore(spec, {t.number: t.params for t in alive}, scores, state.pbt_round)
    by_member = {s.trial: s for s in steps}
    for record in alive:
        step = by_member.get(record.number)
        record.restored_from = checkpoints[step.donor if step else record.number]
        if step is not None:
            donor = state.trial(step.donor)
            record.params = step.params
            record.message = (f"round {state.pbt_round + 1}: from {donor.name} ({scores[step.donor]:g} against "
                              f"{scores[record.number]:g}), perturbed")
        record.value = None
        record.state = TrialState.PENDING
        record.seeds = trial_seeds(spec, record.number, state.pbt_round + 1)
    state.pbt_round += 1
    return steps


def round_message(spec: RLSweepSpec, state: SweepState, steps: list[Exploit]) -> str:
    """What a round's step did, after `step_round`."""
    copies = [f"{state.trial(s.trial).name} <- {state.trial(s.donor).name}" for s in steps]
    return (f"round {state.pbt_round} from {round_end(spec, state.pbt_round - 1):,} steps: "
            + (", ".join(copies) or "no member lagged"))
