"""Bootstrapping a fragment's last and truncated rows from V(next_obs): which rows reuse the next row's value,
which need their own value pass, and the [T, N] next_values both make. Shared by GAE (PPO) and V-trace
(IMPALA, APPO); the convention is `kuberl.trainer.learning.gae.compute_gae`'s, next_values[t] = V(next_obs_t).
"""

from __future__ import annotations

import torch


def bootstrap_rows(terminateds: torch.Tensor, dones: torch.Tensor,
                   valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where V(next_obs_t) is already known and where it must be computed, as [T, N] masks.

    Inside an episode next_obs_t is the next row's obs, so V(next_obs_t) = V(x_{t+1}) (`reuse`). The last row,
    and a truncated step (its next_obs is the final observation, not the reset one), need their own pass
    (`compute`). A terminated step and a row that is no transition bootstrap nothing.
    """
    reuse = torch.zeros_like(dones)
    reuse[:-1] = ~dones[:-1] & valid[1:]
    compute = valid & ~terminateds & ~reuse
    return reuse, compute


def next_values_from(values: torch.Tensor, reuse: torch.Tensor, computed: torch.Tensor | None,
                     compute: torch.Tensor) -> torch.Tensor:
    """next_values[t]: V(x_{t+1}) where `reuse`, the `computed` V(next_obs) where `compute`, 0 elsewhere."""
    next_values = torch.zeros_like(values)
    next_values[:-1] = torch.where(reuse[:-1], values[1:], 0.0)
    if computed is not None:
        next_values[compute] = computed
    return next_values
