"""Schedules of exploration and importance-sampling exponents."""

from __future__ import annotations


def linear_schedule(step: int | float, start: float, end: float, duration: int) -> float:
    """Linear interpolation from start to end over `duration` steps, then end."""
    fraction = min(1.0, max(0.0, float(step) / max(1, duration)))
    return start + fraction * (end - start)


def priority_beta(timesteps: int, start: float, duration: int, final: float = 1.0) -> float:
    """Prioritized replay's importance-sampling exponent: from `start` to `final` over `duration` env steps."""
    return linear_schedule(timesteps, start, final, duration)
