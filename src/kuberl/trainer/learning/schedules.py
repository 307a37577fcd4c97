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


OptimizerRates = list[list[float]]  # a learner's optimizers' learning rates, one list of param groups each


def optimizers_of(learner: object) -> list[torch.optim.Optimizer]:
    """The torch optimizers a learner holds as attributes, in their order (none for a Ray actor's handle)."""
    return [value for value in vars(learner).values() if isinstance(value, torch.optim.Optimizer)] \
        if hasattr(learner, "__dict__") else []


def optimizer_rates(learner: object) -> OptimizerRates:
    """The learning rate of each param group of each of the learner's optimizers."""
    return [[group["lr"] for group in optimizer.param_groups] for optimizer in optimizers_of(learner)]


def set_optimizer_rates(learner: object, rates: OptimizerRates) -> None:
    """Set back rates `optimizer_rates` gave (an optimizer's `load_state_dict` brings the saved run's)."""
    for optimizer, lrs in zip(optimizers_of(learner), rates, strict=True):
        for group, lr in zip(optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
