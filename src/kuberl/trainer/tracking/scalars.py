"""A training result as flat scalars: the names TensorBoard and MLflow log it under."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import ResultLine

# Counters that are the step itself, or bookkeeping no curve needs.
NOT_SCALARS = frozenset({"iteration", "timesteps", "attempt"})


def result_scalars(result: ResultLine, separator: str = "/") -> dict[str, float]:
    """Every finite number of a results line, named by its results.jsonl keys, nested keys joined ("learner/policyLoss",
    "evaluation/returnMean", "replay/shard_0/size"); booleans, strings, lists and NaN are left out."""
    scalars: dict[str, float] = {}

    def visit(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                visit(f"{prefix}{separator}{key}" if prefix else str(key), inner)
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            scalars[prefix] = float(value)

    for key, value in result.to_json().items():
        if key not in NOT_SCALARS:
            visit(str(key), value)
    return scalars
