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


def anneal_horizon(anneal_timesteps: int | None, stop_timesteps: int | None) -> int | None:
    """`annealLr`'s horizon in env steps: `config.annealTimesteps`, else the run's `stop.timesteps` (None: nothing to
    anneal over). A PBT member's run stops at its round's end, but its schedule runs over the sweep's budget."""
    return anneal_timesteps or stop_timesteps or None


def annealed_lr(base_lr: float, timesteps: int, horizon: int) -> float:
    """`annealLr`'s rate after `timesteps` env steps of `horizon`: linear, never quite 0."""
    return base_lr * max(remaining_fraction(timesteps, horizon), 1e-3)


def anneal_lr(optimizer: torch.optim.Optimizer, base_lr: float, timesteps: int, horizon: int) -> None:
    """Set the optimizer's rate to `annealed_lr`."""
    for group in optimizer.param_groups:
        group["lr"] = annealed_lr(base_lr, timesteps, horizon)


def remaining_fraction(timesteps: int, horizon: int) -> float:
    """The share of the anneal horizon still to run, in [0, 1]."""
    return max(0.0, 1.0 - timesteps / horizon)
