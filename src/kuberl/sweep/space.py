"""The search space: Optuna distributions from the sweep's parameters, and samplers seeded per trial."""

from __future__ import annotations

import hashlib
from typing import Any

from kuberl.api.sweep_types import RLSweepSpec, SweepParameter


def distribution(parameter: SweepParameter) -> Any:
    """The Optuna distribution of one parameter (named by its path in the study)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if parameter.type == "categorical":
        return CategoricalDistribution(list(parameter.values or []))
    assert parameter.low is not None and parameter.high is not None
    if parameter.type == "int":
        step = 1 if parameter.log else int(parameter.step or 1)
        return IntDistribution(int(parameter.low), int(parameter.high), log=parameter.log, step=step)
    return FloatDistribution(parameter.low, parameter.high, log=parameter.log, step=parameter.step)


def distributions(spec: RLSweepSpec) -> dict[str, Any]:
    return {p.path: distribution(p) for p in spec.parameters}


def trial_seed(seed: int | None, number: int, salt: str = "") -> int | None:
    """A seed per (sweep seed, trial number): a sampler rebuilt after a restart draws what the first
    one would have for the same trial, and never repeats the draws of earlier trials."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}/{number}/{salt}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def cast(parameter: SweepParameter, value: Any) -> Any:
    """A value as the trial's manifest holds it (int parameters as ints)."""
    if parameter.type == "int":
        return int(value)
    if parameter.type == "float":
        return float(value)
    return value
