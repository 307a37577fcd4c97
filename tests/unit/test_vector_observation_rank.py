"""PPO on vector observations of rank 2 (not images): the actor, the critic and the numpy sampling policy flatten
them, as IMPALA's, DQN's and SAC's networks do."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from kuberl.trainer.algorithms.ppo import PPOConfig

RESHAPED = {"name": "kuberl_testing.vector_envs:ReshapedObservation", "kwargs": {"shape": [2, 2]}}


def test_ppo_trains_and_acts_on_a_rank_2_vector_observation() -> None:
    config = (PPOConfig().environment("CartPole-v1", wrappers=[RESHAPED])
              .rollouts(workers=0, envs_per_worker=2, fragment_length=64)
              .training(num_epochs=2, minibatch_size=64, observation_filter="mean_std").debugging(seed=0))
    with config.build() as algo:
        assert algo.observation_space.shape == (2, 2)
        for _ in range(3):
            result = algo.train()
        assert result["timesteps"] == 3 * 2 * 64 and result["learner"]["updatesTotal"] > 0
        obs, _ = gym.make("CartPole-v1").reset(seed=1)
        action = algo.compute_single_action(obs.reshape(2, 2))
        assert action in (0, 1)
        module = algo.policy_module()
        assert module(torch.zeros(3, 2, 2)).shape == (3,)
        assert np.isfinite(algo.evaluate(episodes=1)["episodeReturnMean"])
