"""Reward normalization (`spec.config.normalizeRewards`): rewards divided by the running std of the discounted return.

CleanRL's continuous-control PPO and RL Zoo's VecNormalize scale each reward by the standard deviation of the
discounted return it is part of, then clip it to +-10. The learner does it here, on the fragments it is sent,
rather than a wrapper in every env: one set of statistics serves all rollout workers (none to sync), it is kept
in the learner's checkpoint, and the envs, their episode returns and the episode traces keep the raw rewards.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from kuberl.trainer.sampling.filters import CLIP, RunningStats
from kuberl.trainer.sampling.rollout_worker import SampleBatch

EPSILON = 1e-8


def discounted_returns(rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray, gamma: float,
                       running: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each step's discounted return so far, ret_t = gamma * ret_(t-1) + r_t, for [T, N] arrays; `running` is
    every env's return before row 0. An episode's end (`dones`) starts the next one at 0; an invalid row (a
    native vector env's reset step: no transition) leaves the return as it is. Returns (the [T, N] returns of
    the rows, the running returns after the last row)."""
    running = np.asarray(running, dtype=np.float64).copy()
    out = np.zeros(np.shape(rewards), dtype=np.float64)
    for t in range(len(rewards)):
        running = np.where(valid[t], gamma * running + rewards[t], running)
        out[t] = running
        running = np.where(valid[t] & dones[t], 0.0, running)
    return out, running


class RewardScale:
    """The running std of discounted returns over every fragment the learner took, and the returns in progress of
    every trajectory a fragment ended in the middle of (`scale` carries them to the fragment that goes on with it).

    Those are kept by the batch's `column_keys`: an env of one rollout worker instance (a worker that replaces a
    dead one starts its envs' returns at 0), or an agent in such an env (multi-agent columns are laid out anew
    each fragment, and the return follows the agent, not the column)."""

    def __init__(self, gamma: float, clip: float = CLIP):
        self.gamma = gamma
        self.clip = clip
        self.stats = RunningStats(())
        self.running: dict[Hashable, float] = {}  # a trajectory's key -> its discounted return so far

    def scale(self, batch: SampleBatch) -> np.ndarray:
        """The fragment's rewards divided by the std of the discounted returns (this fragment's included) and
        clipped to +-clip, as float32 [T, N]."""
        d = batch.data
        rewards = d["rewards"]
        keys = batch.column_keys or tuple(((batch.worker, c), (batch.worker, c)) for c in range(rewards.shape[1]))
        # A trajectory's return is taken out as the fragment goes on with it, and put back only if it goes on after.
        running = np.array([0.0 if first is None else self.running.pop(first, 0.0) for first, _ in keys])
        returns, after = discounted_returns(
            rewards, d["terminateds"] | d["truncateds"], d["valid"], self.gamma, running)
        for (_, last), value in zip(keys, after, strict=True):
            if last is not None:
                self.running[last] = float(value)
        self.stats.push_batch(returns[d["valid"]])
        scaled = rewards / np.sqrt(float(self.stats.std) ** 2 + EPSILON)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)
