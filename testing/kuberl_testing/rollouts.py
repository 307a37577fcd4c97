"""Rollout-worker helpers for tests: a policy whose actions depend only on what it sees, and a check that two
worker configurations sample exactly the same transitions."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np

from kuberl.trainer.sampling.rollout_worker import RolloutWorker, WorkerConfig


class ObsPolicy:
    """Actions from the observations alone (no generator), so a batch depends only on the envs and their seeds."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int):
        self.n = action_space.n

    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        flat = obs.reshape(len(obs), -1).astype(np.float64)
        actions = (np.floor(np.abs(flat).sum(axis=1) * 7.0) % self.n).astype(np.int64)
        return actions, {"marker": actions.astype(np.float32)}

    def set_weights(self, weights) -> None:
        pass


def assert_same_samples(config: WorkerConfig, groups: int, fragments: int = 3) -> None:
    """A worker with its envs in `groups` groups samples exactly what one with a single group does."""
    workers = [RolloutWorker(config, ObsPolicy), RolloutWorker(replace(config, env_groups=groups), ObsPolicy)]
    assert len(workers[1].groups) == groups
    episodes = 0
    try:
        for _ in range(fragments):
            one, grouped = (w.sample() for w in workers)
            assert one.data.keys() == grouped.data.keys()
            for key in one.data:
                assert np.array_equal(one.data[key], grouped.data[key]), key
            assert one.env_steps == grouped.env_steps
            strip = [{k: v for k, v in e.items() if not k.endswith("Time")} for e in grouped.episodes]
            key = lambda e: (e["worker"], e["return"], e["length"])  # noqa: E731 - same episodes, any order
            assert sorted(strip, key=key) == sorted(
                [{k: v for k, v in e.items() if not k.endswith("Time")} for e in one.episodes], key=key)
            episodes += len(one.episodes)
        assert episodes > 0, "no episode ended: the check would miss the episode bookkeeping"
    finally:
        for w in workers:
            w.stop()
