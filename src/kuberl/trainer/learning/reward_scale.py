"""Reward normalization (`spec.config.normalizeRewards`): rewards divided by the running std of the discounted return.

CleanRL's continuous-control PPO and RL Zoo's VecNormalize scale each reward by the standard deviation of the
discounted return it is part of, then clip it to +-10. The learner does it here, on the fragments it is sent,
rather than a wrapper in every env: one set of statistics serves all rollout workers (none to sync), it is kept
in the learner's checkpoint, and the envs, their episode returns and the episode traces keep the raw rewards.
"""

from __future__ import annotations

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
    """The running std of discounted returns over every fragment the learner took, and each worker's envs'
    returns in progress (`scale` keeps them from one of a worker's fragments to its next)."""

    def __init__(self, gamma: float, clip: float = CLIP):
        self.gamma = gamma
        self.clip = clip
        self.stats = RunningStats(())
        self.running: dict[int, np.ndarray] = {}  # worker index -> its envs' discounted returns so far

    def scale(self, batch: SampleBatch) -> np.ndarray:
        """The fragment's rewards divided by the std of the discounted returns (this fragment's included) and
        clipped to +-clip, as float32 [T, N]."""
        d = batch.data
        rewards = d["rewards"]
        running = self.running.get(batch.worker)
        if running is None or running.shape != rewards.shape[1:]:  # a new (or restarted) worker
            running = np.zeros(rewards.shape[1:], dtype=np.float64)
        returns, self.running[batch.worker] = discounted_returns(
            rewards, d["terminateds"] | d["truncateds"], d["valid"], self.gamma, running)
        self.stats.push_batch(returns[d["valid"]])
        scaled = rewards / np.sqrt(float(self.stats.std) ** 2 + EPSILON)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)
