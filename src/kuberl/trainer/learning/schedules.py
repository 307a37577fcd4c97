"""Schedules of exploration, importance-sampling exponents and learning rates."""

from __future__ import annotations

import torch


def linear_schedule(step: int | float, start: float, end: float, duration: int) -> float:
    """Linear interpolation from start to end over `duration` steps, then end."""
    fraction = min(1.0, max(0.0, float(step) / max(1, duration)))
    return start + fraction * (end - start)


def priority_beta(timesteps: int, start: float, duration: int, final: float = 1.0) -> float:
    """Prioritized replay's importance-sampling exponent: from `start` to `final` over `duration` env steps."""
    return linear_schedule(timesteps, start, final, duration)


def anneal_lr(optimizer: torch.optim.Optimizer, base_lr: float, remaining: float) -> None:
    """`annealLr`: the learning rate at `remaining` (1 to 0) of the run's env steps, linear, never quite 0."""
    for group in optimizer.param_groups:
        group["lr"] = base_lr * max(remaining, 1e-3)


def remaining_fraction(timesteps: int, stop_timesteps: int) -> float:
    """The share of the env-step budget still to run, in [0, 1]."""
    return max(0.0, 1.0 - timesteps / stop_timesteps)
