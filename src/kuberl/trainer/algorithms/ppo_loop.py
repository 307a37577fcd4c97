"""PPO's learning of one policy: each iteration, the learner's batch of the policy's fragments, then its epochs.

`PPO` holds one `PPOLoop`; multi-agent PPO one per policy, fed the policy's columns of every worker's fragment.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch

from kuberl.api.hyperparams import PPOParams
from kuberl.trainer.algorithms.policy_loop import PolicyLoop
from kuberl.trainer.learners.ppo import PPOLearner
from kuberl.trainer.learning.device import Bf16Setting, obs_tensor
from kuberl.trainer.models.actor_critic import Actor, ActorCritic
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.sampling.rollout_worker import SampleBatch


class PPOLoop(PolicyLoop):
    learner: PPOLearner

    def __init__(self, learner: PPOLearner):
        self.learner = learner

    @classmethod
    def build(cls, spaces: tuple[gym.Space, gym.Space], params: PPOParams, device: torch.device,
              rng: np.random.Generator, bf16: Bf16Setting) -> PPOLoop:
        """A policy of these (observation, action) spaces: its actor-critic and `PPOLearner`."""
        model = ActorCritic(*spaces, params.hidden, params.activation, EncoderSpec.from_params(params))
        return cls(PPOLearner(model, params, device, rng, bf16=bf16))

    @property
    def actor(self) -> Actor:
        return self.learner.model.actor

    def learn(self, batches: list[SampleBatch]) -> dict[str, float]:
        """One iteration's learning from the policy's fragments; the learner's statistics."""
        batch = self.learner.learner_batch(batches)
        learning = time.perf_counter()
        stats = self.learner.update(batch)
        stats["updateSeconds"] = time.perf_counter() - learning
        return stats

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            obs_t = obs_tensor(obs, self.learner.device)
            actions = self.actor.distribution(obs_t).sample() if explore else self.actor.greedy(obs_t)
        return actions.cpu().numpy()


__all__ = ["PPOLoop"]
