"""Ape-X DQN (algorithm "apex-dqn", Horgan et al. 2018): double DQN on the replay-shard topology
(`kuberl.trainer.algorithms.sharded`: actors, replay shards and a learner that never wait for each other).

- Each rollout worker explores with its own epsilon eps_i = base ** (1 + exponent * i / (N - 1)),
  reached from `epsilon_start` over the run's first `epsilon_timesteps` env steps (`worker_epsilon`), and
  gives the transitions it adds initial priorities from its own TD errors (`replay.nstep.batch_priorities`).
- The learner runs `QLearner.update` (DQN's loss, `kuberl.trainer.algorithms.dqn`) with importance weights.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import torch

from kuberl.api.hyperparams import ApexDQNParams
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.sharded import ShardedReplay, shard_stats
from kuberl.trainer.learners.q import QLearner
from kuberl.trainer.learning.device import Bf16Setting, obs_tensor
from kuberl.trainer.learning.schedules import linear_schedule
from kuberl.trainer.models.greedy import GreedyQ
from kuberl.trainer.models.q_network import QNetwork, build_q_network
from kuberl.trainer.replay.nstep import batch_priorities
from kuberl.trainer.sampling.policies import QPolicyFactory
from kuberl.trainer.sampling.policy_settings import PolicySettings

__all__ = ["ApexDQN", "ApexDQNConfig", "apex_epsilons", "shard_stats", "worker_epsilon"]


def apex_epsilons(workers: int, base: float = 0.4, exponent: float = 7.0) -> list[float]:
    """Ape-X per-worker exploration: eps_i = base ** (1 + exponent * i / (N - 1)); one worker gets base."""
    if workers < 1:
        return []
    if workers == 1:
        return [base]
    return [base ** (1 + exponent * i / (workers - 1)) for i in range(workers)]


def worker_epsilon(own: float, timesteps: int, start: float, warmup_timesteps: int) -> float:
    """A worker's epsilon `timesteps` env steps into the run: from `start` down to its `own` over the run's
    first `warmup_timesteps` (few workers would otherwise start nearly greedy on an untrained network, and
    replay would hold one action's transitions: see `ApexDQNParams.epsilon_timesteps`), then its own."""
    return linear_schedule(timesteps, start, own, warmup_timesteps)


def build_apex_learner(observation_space: gym.Space, action_space: gym.Space, params: ApexDQNParams,
                       device: torch.device, bf16: Bf16Setting = False) -> QLearner:
    return QLearner(build_q_network(observation_space, action_space, params), params, device, bf16)


class ApexDQNConfig(AlgorithmConfig):
    algorithm = "apex-dqn"

    def algorithm_class(self) -> type[ApexDQN]:
        return ApexDQN


class ApexDQN(ShardedReplay[QNetwork]):
    params: ApexDQNParams
    learner_builder = staticmethod(build_apex_learner)
    initial_priorities = staticmethod(batch_priorities)

    def setup(self) -> None:
        workers = max(1, self.spec.rollouts.workers)
        self.epsilons = apex_epsilons(workers, self.params.worker_epsilon_base, self.params.worker_epsilon_exponent)
        super().setup()

    def make_policy_factory(self) -> QPolicyFactory:
        return QPolicyFactory.from_params(self.params)

    def sampling_settings(self, position: int, timesteps: int) -> PolicySettings:
        p = self.params
        return PolicySettings(epsilon=worker_epsilon(self.epsilons[position], timesteps, p.epsilon_start,
                                                     p.epsilon_timesteps))

    def local_model(self) -> QNetwork:
        return build_q_network(self.observation_space, self.action_space, self.params)

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        network = self.refreshed_local_model()
        with torch.no_grad():
            q = network(obs_tensor(obs)).numpy()
        actions = q.argmax(axis=1)
        if explore:
            random = self.np_random.random(len(actions)) < self.epsilons[-1]
            actions = np.where(random, self.np_random.integers(0, q.shape[1], len(actions)), actions)
        return actions

    def evaluation_settings(self) -> PolicySettings:
        return PolicySettings(epsilon=self.epsilons[-1])  # what compute_actions explores with in this process too

    def policy_module(self) -> torch.nn.Module:
        return GreedyQ(copy.deepcopy(self.refreshed_local_model()).eval())
