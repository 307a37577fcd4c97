"""Generalised advantage estimation (Schulman et al., 2016) on [T, N] rollout arrays. Pure numpy."""

from __future__ import annotations

import numpy as np


def compute_gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminateds: np.ndarray,
                dones: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and value targets (returns) for time-major arrays shaped [T, N].

    values[t] = V(obs_t); next_values[t] = V(next_obs_t), the observation the
    step actually led to. A terminated step bootstraps nothing; a truncated
    one bootstraps from V(next_obs_t). `dones` (terminated, truncated or any
    other break in the trajectory) stops the lambda-chain from reaching past
    the step, and the last row bootstraps from next_values.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    deltas = rewards + gamma * np.asarray(next_values) * (1.0 - np.asarray(terminateds, dtype=np.float64)) - values
    carry = 1.0 - np.asarray(dones, dtype=np.float64)
    advantages = np.zeros_like(deltas)
    running = np.zeros(deltas.shape[1:], dtype=np.float64)
    for t in range(len(deltas) - 1, -1, -1):
        running = deltas[t] + gamma * lam * carry[t] * running
        advantages[t] = running
    returns = advantages + values
    return advantages.astype(np.float32), returns.astype(np.float32)
