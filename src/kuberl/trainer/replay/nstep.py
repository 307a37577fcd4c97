"""The math of off-policy Q-learning: n-step transitions, double-DQN targets, the weighted Huber loss,
and exploration schedules. Pure functions (numpy in, numpy out; torch in, torch out).

A transition here is (obs, action, reward, next_obs, discount) where `reward` is the discounted
sum of up to n rewards, `next_obs` is the observation to bootstrap from and `discount` is
gamma^m for an m-step transition, or 0 when the episode terminated within those m steps. The
TD target is then simply reward + discount * Q_target(next_obs, argmax_a Q_online(next_obs, a)).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

Batch = dict[str, np.ndarray]


def nstep_transitions(
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    next_obs: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    *,
    gamma: float,
    n: int,
) -> Batch:
    """n-step transitions from a fragment of T steps of E envs, flattened to T*E rows (time-major).

    Inputs are [T, E, ...]: `next_obs[t]` is the true observation after step t (the final one when
    the episode ended there, never the reset one). A transition stops early at the end of its
    episode or of the fragment, bootstrapping from wherever it stopped: a truncated episode
    (time limit) bootstraps, a terminated one does not (discount 0).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rewards = np.asarray(rewards, dtype=np.float64)
    steps, envs = rewards.shape[:2]
    terminated = np.asarray(terminated, dtype=bool)
    ended = terminated | np.asarray(truncated, dtype=bool)
    returns = np.zeros((steps, envs))
    discount = np.ones((steps, envs))
    last = np.repeat(np.arange(steps)[:, None], envs, axis=1)  # the step each transition bootstraps after
    alive = np.ones((steps, envs), dtype=bool)
    start = np.arange(steps)
    for k in range(n):
        idx = start + k
        in_fragment = (idx < steps)[:, None]
        take = alive & in_fragment
        row = np.minimum(idx, steps - 1)
        returns += np.where(take, discount * rewards[row], 0.0)
        discount = np.where(take, discount * gamma, discount)
        last = np.where(take, row[:, None], last)
        hit_terminal = take & terminated[row]
        discount = np.where(hit_terminal, 0.0, discount)
        alive = take & ~ended[row]
    env_index = np.broadcast_to(np.arange(envs), (steps, envs))
    return {
        "obs": _flatten(np.asarray(obs)),
        "action": _flatten(np.asarray(actions)),
        "reward": returns.reshape(-1).astype(np.float32),
        "next_obs": _flatten(np.asarray(next_obs)[last, env_index]),
        "discount": discount.reshape(-1).astype(np.float32),
    }


def _flatten(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def q_targets(
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """reward + discount * Q_target(s', a*): double DQN picks a* with the online net, plain DQN with the target."""
    chooser = next_q_online if next_q_online is not None else next_q_target
    best = chooser.argmax(dim=1, keepdim=True)
    return reward + discount * next_q_target.gather(1, best).squeeze(1)


def weighted_huber_loss(
    q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, td_errors): the importance-weighted mean Huber loss (delta 1) and the raw TD errors."""
    td_errors = targets - q_taken
    per_sample = F.huber_loss(q_taken, targets, reduction="none", delta=1.0)
    loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
    return loss, td_errors.detach()


def linear_schedule(step: int | float, start: float, end: float, duration: int) -> float:
    """Linear interpolation from start to end over `duration` steps, then end."""
    fraction = min(1.0, max(0.0, float(step) / max(1, duration)))
    return start + fraction * (end - start)


def apex_epsilons(workers: int, base: float = 0.4, exponent: float = 7.0) -> list[float]:
    """Ape-X per-worker exploration: eps_i = base ** (1 + exponent * i / (N - 1)); one worker gets base."""
    if workers < 1:
        return []
    if workers == 1:
        return [base]
    return [base ** (1 + exponent * i / (workers - 1)) for i in range(workers)]
